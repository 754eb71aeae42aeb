// Package whoami names who runs a command and on which machine, for the
// records an operator's action leaves (a requeue, a landing): the name
// helps whoever reads the flight data recorder later, so a lookup that
// fails says "unknown" instead of failing the action.
package whoami

import (
	"os"
	"os/user"
)

// User is the operating-system user running the process: the account
// name, else $USER, else "unknown".
func User() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	if n := os.Getenv("USER"); n != "" {
		return n
	}
	return "unknown"
}

// Host is the machine's host name, or "unknown".
func Host() string {
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "unknown"
}
