package root

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// completionCommand adds cobra's `completion` command to root and makes its
// bash script work in a bash without the bash-completion package. Cobra's
// script (GenBashCompletionV2) splits the command line with
// _init_completion when bash-completion has loaded it, and otherwise with
// a fallback that still calls bash-completion's _get_comp_words_by_ref, so
// `source <(tilectl completion bash)` fails with "command not found" on a
// minimal system. The script printed here ends by redefining that
// fallback: it uses _get_comp_words_by_ref where bash-completion is
// loaded and splits the line itself otherwise.
func completionCommand(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		for _, sh := range c.Commands() {
			if sh.Name() != "bash" {
				continue
			}
			sh.Long = fmt.Sprintf(`Generate the autocompletion script for the bash shell.

The script works with or without the 'bash-completion' package; with it,
words that contain '=' or ':' complete as bash-completion splits them.

To load completions in your current shell session:

	source <(%[1]s completion bash)

To load completions for every new session, execute once:

	%[1]s completion bash > /etc/bash_completion.d/%[1]s      # read by /etc/bash.bashrc's bash-completion
	echo 'source <(%[1]s completion bash)' >> ~/.bashrc          # without bash-completion

You will need to start a new shell for this setup to take effect.
`, root.Name())
			sh.RunE = func(cmd *cobra.Command, _ []string) error {
				noDesc, _ := cmd.Flags().GetBool("no-descriptions")
				return genBashCompletion(cmd.OutOrStdout(), cmd.Root(), !noDesc)
			}
		}
	}
}

// genBashCompletion writes cobra's bash completion script for root and the
// fallback that frees it from bash-completion.
func genBashCompletion(w io.Writer, root *cobra.Command, descriptions bool) error {
	if err := root.GenBashCompletionV2(w, descriptions); err != nil {
		return fmt.Errorf("write the bash completion script: %w", err)
	}
	if _, err := fmt.Fprintf(w, bashInitFallback, root.Name()); err != nil {
		return fmt.Errorf("write the bash completion script: %w", err)
	}
	return nil
}

// bashInitFallback replaces the script's __<name>_init_completion, which
// __start_<name> calls when bash-completion's _init_completion is not
// defined. It sets what _get_comp_words_by_ref -n =: sets: words, cword,
// cur (the current word up to the cursor) and prev, from COMP_WORDS,
// gluing back the words bash split at '=' or ':' (a word of only those
// characters, and the word right after one, join the word before them
// when no blank stands between them on the line).
const bashInitFallback = `
# Without the bash-completion package: split the line here.
__%[1]s_init_completion()
{
    COMPREPLY=()
    if declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
        _get_comp_words_by_ref "$@" cur prev words cword
        return
    fi
    local i w rest trimmed blanks glued=0 pos=0 prevsep=0
    words=()
    cword=0
    cur=
    for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
        w=${COMP_WORDS[i]}
        rest=${COMP_LINE:pos}
        trimmed=${rest#"${rest%%%%[![:space:]]*}"}
        blanks=$(( ${#rest} - ${#trimmed} ))
        pos=$(( pos + blanks ))
        glued=0
        if ((i > 1 && blanks == 0)); then
            if [[ -n $w && -z ${w//[=:]/} ]] || ((prevsep)); then
                glued=1
            fi
        fi
        prevsep=0
        [[ -n $w && -z ${w//[=:]/} ]] && prevsep=1
        if ((glued)); then
            words[${#words[@]}-1]+=$w
        else
            words+=("$w")
        fi
        if ((i == COMP_CWORD)); then
            cword=$(( ${#words[@]} - 1 ))
            local before=$(( COMP_POINT - pos ))
            ((before < 0)) && before=0
            if ((glued)); then
                local joined=${words[cword]}
                cur=${joined:0:${#joined}-${#w}}${w:0:before}
            else
                cur=${w:0:before}
            fi
        fi
        pos=$(( pos + ${#w} ))
    done
    prev=
    ((cword > 0)) && prev=${words[cword-1]}
    return 0
}
`
