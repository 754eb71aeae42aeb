package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// clientAppName is the application_name put on tilectl's database URL, so
// the soak can find (and terminate) exactly tilectl's backends.
const clientAppName = "tilectl_chaos_client"

// databases are the two scratch databases of one soak: tilectl's and the
// provider's, in the soak's throwaway cluster.
type databases struct {
	adminURL string
	client   string // database names
	provider string
}

func createDatabases(ctx context.Context, adminURL string) (*databases, error) {
	suffix := make([]byte, 5)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("name scratch databases: %w", err)
	}
	d := &databases{
		adminURL: adminURL,
		client:   "tilechaos_c_" + hex.EncodeToString(suffix),
		provider: "tilechaos_p_" + hex.EncodeToString(suffix),
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres admin URL (set TILECTL_TEST_DATABASE_URL): %w", err)
	}
	defer conn.Close(ctx)
	for _, name := range []string{d.client, d.provider} {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return nil, fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return d, nil
}

// url returns the admin URL pointed at database name, with application_name
// set when app is not empty.
func (d *databases) url(name, app string) string {
	u, err := url.Parse(d.adminURL)
	if err != nil {
		panic(fmt.Sprintf("chaos: admin URL was parsed before: %v", err))
	}
	u.Path = "/" + name
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	if app != "" {
		q.Set("application_name", app)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (d *databases) clientURL() string   { return d.url(d.client, clientAppName) }
func (d *databases) providerURL() string { return d.url(d.provider, "tilechaos_provider") }

// breakClientConnections terminates every backend tilectl holds on its
// database and returns how many it ended. Backends are found by
// application_name, and by database name for a client that overrides it.
func (d *databases) breakClientConnections(ctx context.Context) (int, error) {
	conn, err := pgx.Connect(ctx, d.adminURL)
	if err != nil {
		return 0, fmt.Errorf("break client connections: %w", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, d.client).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("break client connections: %w", err)
	}
	return n, nil
}
