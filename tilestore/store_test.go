package tilestore_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
	"github.com/tilectl/tilectl/tilestore"
)

func withURL(t *testing.T, mutate func(u *url.URL)) string {
	t.Helper()
	u, err := url.Parse(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	mutate(u)
	return u.String()
}

func TestOpenExplainsWhyItCannotConnect(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-Pa55word"
	cases := []struct {
		name     string
		url      string
		problem  tilestore.ConnectProblem
		contains []string
	}{
		{
			name: "nothing listens on the port",
			url: withURL(t, func(u *url.URL) {
				u.Host = "127.0.0.1:1"
				u.User = url.UserPassword("postgres", secret)
			}),
			problem:  tilestore.ProblemUnreachable,
			contains: []string{"cannot reach Postgres at 127.0.0.1:1", "is it running?", "TILECTL_DATABASE_URL"},
		},
		{
			name:     "database does not exist",
			url:      withURL(t, func(u *url.URL) { u.Path = "/tilectl_no_such_db" }),
			problem:  tilestore.ProblemNoDatabase,
			contains: []string{`database "tilectl_no_such_db" does not exist`},
		},
		{
			name: "role does not exist",
			url: withURL(t, func(u *url.URL) {
				u.User = url.UserPassword("tilectl_no_such_user", secret)
			}),
			problem:  tilestore.ProblemCredentials,
			contains: []string{`Postgres rejected the credentials for user "tilectl_no_such_user"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := tilestore.Open(ctx, tc.url)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded, want an error")
			}
			var ce *tilestore.ConnectError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is not a *ConnectError", err, err)
			}
			if ce.Problem != tc.problem {
				t.Errorf("problem = %q, want %q (%v)", ce.Problem, tc.problem, err)
			}
			msg := err.Error()
			for _, want := range tc.contains {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not contain %q", msg, want)
				}
			}
			if strings.Contains(msg, secret) {
				t.Errorf("message leaks the password: %q", msg)
			}
		})
	}
}

func TestOpenConnectsToARealDatabase(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.New(t)
	ctx := testCtx(t)
	s, err := tilestore.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := s.UpsertFlight(ctx, "F1", tilestore.FlightAirborne)
	if err != nil {
		t.Fatal(err)
	}
	if f.State != tilestore.FlightAirborne {
		t.Errorf("state = %q", f.State)
	}
}

func TestUpsertFlightSetsStateAndFlightReadsIt(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := testCtx(t)
	if _, err := s.Flight(ctx, "nope"); !errors.Is(err, tilestore.ErrFlightNotFound) {
		t.Fatalf("Flight(unknown) err = %v, want ErrFlightNotFound", err)
	}
	first, err := s.UpsertFlight(ctx, "F1", tilestore.FlightAirborne)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpsertFlight(ctx, "F1", tilestore.FlightOnGround); err != nil {
		t.Fatal(err)
	}
	got, err := s.Flight(ctx, "F1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != tilestore.FlightOnGround || !got.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("flight = %+v, want on_ground with the first created_at %v", got, first.CreatedAt)
	}
	if _, err := s.UpsertFlight(ctx, "F1", "landed"); err == nil {
		t.Error("UpsertFlight accepted state \"landed\"")
	}
	if _, err := s.UpsertFlight(ctx, "F1'; DROP TABLE tiles; --", tilestore.FlightOnGround); !errors.Is(err, tilestore.ErrInvalidID) {
		t.Errorf("UpsertFlight with SQL in the ID: err = %v, want ErrInvalidID", err)
	}
}
