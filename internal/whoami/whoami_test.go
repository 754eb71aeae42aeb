package whoami

import (
	"os"
	"os/user"
	"testing"
)

func TestUserAndHostNameThisProcessAndMachine(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if got := User(); got != u.Username {
		t.Errorf("User() = %q, want %q", got, u.Username)
	}
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if got := Host(); got != h {
		t.Errorf("Host() = %q, want %q", got, h)
	}
}
