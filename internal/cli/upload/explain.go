package upload

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/uploader"
)

// explain adds to a run's error where the setting at fault came from, so
// the operator knows what to change: provider_url for a URL with no provider
// API behind it, the token's real source for 401/403.
func (r *run) explain(err error) error {
	if err == nil {
		return nil
	}
	if databaseLost(err) {
		return r.explainDatabaseLost(err)
	}
	if errors.Is(err, uploader.ErrNoProvider) {
		err = fmt.Errorf("%w\n  provider_url %s comes from %s; fix it there (tilectl config view shows every value and its source)",
			err, r.cfg.ProviderURL, r.cfg.Source("provider_url"))
		var np *uploader.NoProviderError
		if errors.As(err, &np) && np.FirstContact > 0 {
			err = fmt.Errorf("%w\n  a provider that answers this slowly needs a longer upload.first_contact_timeout (%s, from %s)",
				err, r.cfg.Upload.FirstContactTimeout, r.cfg.Source("upload.first_contact_timeout"))
		}
		return err
	}
	if errors.Is(err, uploader.ErrNoSequencing) {
		return fmt.Errorf("%w\n  upload.client_id %s comes from %s", err, r.cfg.Upload.ClientID, r.cfg.Source("upload.client_id"))
	}
	var pe *uploader.ProviderError
	if errors.As(err, &pe) && (pe.Status == 401 || pe.Status == 403) {
		return fmt.Errorf("%w\n  the provider token comes from %s", err, r.cfg.Source("provider_token"))
	}
	return err
}

// requireToken refuses to send anything without a token: the provider
// would only answer 401, after the run had journaled its first batch.
func requireToken(c *config.Config) error {
	if c.ProviderToken.IsSet() {
		return nil
	}
	where := []string{"environment TILECTL_PROVIDER_TOKEN", "--provider-token-file FILE", "provider_token in the config file"}
	src := c.Source("provider_token")
	msg := "no provider token: set one with " + strings.Join(where, ", or ")
	if src.Kind != config.SourceDefault {
		msg = fmt.Sprintf("the provider token from %s is empty: set one with %s", src, strings.Join(where, ", or "))
	}
	return exitcode.UsageError(errors.New(msg))
}
