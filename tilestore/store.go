package tilestore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the Postgres tile metadata store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	run  Run // the owner of the batches it claims (see ForRun)
}

// NewStore wraps an existing pool. The caller keeps ownership of the pool:
// Close on this Store closes it.
// Its run is NewRun()'s: use ForRun to name it.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, run: NewRun()} }

// Pool returns the underlying pool, for advisory locks and migrations.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// ConnectProblem says why Open could not use the database.
type ConnectProblem string

const (
	ProblemUnreachable   ConnectProblem = "unreachable"  // no server answered
	ProblemCredentials   ConnectProblem = "credentials"  // 28P01 / 28000
	ProblemNoDatabase    ConnectProblem = "no_database"  // 3D000
	ProblemBadURL        ConnectProblem = "bad_url"      // the URL did not parse
	ProblemServerRefused ConnectProblem = "server_error" // any other server error
)

// ConnectError is what Open returns when it cannot use the database. Its
// message names the host, port, user and database but never the password.
type ConnectError struct {
	Problem  ConnectProblem
	Host     string
	Port     uint16
	User     string
	Database string
	Err      error // already stripped of the password
	// URLFrom names where the URL came from, for the hint, e.g.
	// "database_url (from flag --database-url)"; TILECTL_DATABASE_URL when
	// empty.
	URLFrom string
}

func (e *ConnectError) Error() string {
	addr := net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
	from := e.URLFrom
	if from == "" {
		from = "TILECTL_DATABASE_URL"
	}
	switch e.Problem {
	case ProblemUnreachable:
		return fmt.Sprintf("cannot reach Postgres at %s: %v (is it running? check %s)", addr, e.Err, from)
	case ProblemCredentials:
		return fmt.Sprintf("Postgres rejected the credentials for user %q at %s (check the user and password in %s)", e.User, addr, from)
	case ProblemNoDatabase:
		return fmt.Sprintf("database %q does not exist on the Postgres server at %s (create it, or fix the database name in %s)", e.Database, addr, from)
	case ProblemBadURL:
		return fmt.Sprintf("invalid database URL: %v (expected postgres://user@host:port/dbname in %s)", e.Err, from)
	default:
		return fmt.Sprintf("connect to Postgres at %s as %q, database %q: %v", addr, e.User, e.Database, e.Err)
	}
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Open connects to databaseURL and checks the connection with a ping, so a
// wrong host, password or database name is reported here, clearly, rather
// than by the first query.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	pw := passwordOf(databaseURL)
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, &ConnectError{Problem: ProblemBadURL, Err: redactErr(err, pw)}
	}
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		// A host that drops packets would otherwise hang until ctx ends.
		cc.ConnectTimeout = 10 * time.Second
	}
	base := ConnectError{Host: cc.Host, Port: cc.Port, User: cc.User, Database: cc.Database}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		base.Problem, base.Err = ProblemBadURL, redactErr(err, pw)
		return nil, &base
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		base.Problem, base.Err = classifyConnectErr(err), redactErr(err, pw)
		if base.Problem == ProblemUnreachable {
			base.Err = redactErr(innermost(err), pw)
		}
		return nil, &base
	}
	return NewStore(pool), nil
}

func classifyConnectErr(err error) ConnectProblem {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000":
			return ProblemCredentials
		case "3D000":
			return ProblemNoDatabase
		}
		return ProblemServerRefused
	}
	return ProblemUnreachable
}

// innermost drops pgconn's "failed to connect to `user=... database=...`"
// prefix, which the ConnectError message already says in its own words.
func innermost(err error) error {
	var ne *net.OpError
	if errors.As(err, &ne) {
		return ne
	}
	return err
}

func passwordOf(databaseURL string) string {
	if u, err := url.Parse(databaseURL); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
	}
	// key=value form: password=...
	for _, f := range strings.Fields(databaseURL) {
		if v, ok := strings.CutPrefix(f, "password="); ok {
			return strings.Trim(v, "'")
		}
	}
	return ""
}

// redactErr keeps a password out of an error message. The returned error
// loses the chain only when it had to rewrite the text.
func redactErr(err error, pw string) error {
	if err == nil || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// inTx runs fn in a transaction, committing when fn returns nil.
//
// Its commit waits for the disk even where the server's default says
// otherwise: the journal's safety argument (a batch is on disk before its
// first byte is sent; a give-up commits with its increment) needs it.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, durableTx, fn)
}

// txBegin is how a transaction begins: its BEGIN and the settings that
// hold for it, sent in one round trip either way: as one simple-protocol
// query before anything else (options), or queued, one statement after
// another, ahead of the transaction's first statement in the same
// pipeline (queue; read skips their results), which saves the round trip
// of a BEGIN of its own.
type txBegin []string

func (b txBegin) options() pgx.TxOptions { return pgx.TxOptions{BeginQuery: strings.Join(b, "; ")} }

func (b txBegin) queue(w *pgx.Batch) {
	for _, q := range b {
		w.Queue(q)
	}
}

func (b txBegin) read(br pgx.BatchResults) error {
	for range b {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// first begins the transaction on q in the round trip of its first
// statement, sql, whose result read takes.
func (b txBegin) first(ctx context.Context, q interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, read func(pgx.BatchResults) error, sql string, args ...any) error {
	w := &pgx.Batch{}
	b.queue(w)
	w.Queue(sql, args...)
	br := q.SendBatch(ctx, w)
	err := b.read(br)
	if err == nil {
		err = read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// errNotCommitted is a COMMIT that ended its transaction without
// committing it. Postgres answers the COMMIT of a transaction in the failed
// state (a statement of it failed) with the command tag ROLLBACK, not with
// an error; pgx's Tx.Commit checks that tag, and queueCommit and commit do
// the same for the transactions the store begins and commits itself.
var errNotCommitted = errors.New("COMMIT rolled the transaction back")

// queueCommit queues the COMMIT of a pipelined transaction on w: the
// batch's Close then fails unless the transaction committed. A failed
// statement queued before it makes the server skip it (one Sync ends the
// batch, in every exec mode) and Close return that statement's error; the
// tag is checked as well, so that the batch is never taken as committed
// when its transaction failed in an earlier round trip.
func queueCommit(w *pgx.Batch) {
	w.Queue("COMMIT").Exec(checkCommitted)
}

// commit commits the transaction open on q, begun by the store itself
// (txBegin), in a round trip of its own.
func commit(ctx context.Context, q interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) error {
	tag, err := q.Exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	return checkCommitted(tag)
}

func checkCommitted(tag pgconn.CommandTag) error {
	if tag.String() != "COMMIT" {
		return fmt.Errorf("%w (command tag %q)", errNotCommitted, tag.String())
	}
	return nil
}

// onConn runs fn, a pipelined transaction (txBegin.first ... COMMIT), on
// a pooled connection of its own, and rolls back what a failed fn left
// open (rollbackLeft).
func (s *Store) onConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection not back to idle (rollback failed) is closed by the
	// pool, never reused inside a transaction.
	defer conn.Release()
	if err := fn(conn.Conn()); err != nil {
		rollbackLeft(ctx, conn.Conn())
		return err
	}
	return nil
}

// rollbackLeft rolls back the transaction a failed pipelined transaction
// (txBegin.queue) left open, if any, so that its connection goes back to
// the pool clean; the pool closes a connection it gets back in a
// transaction, never reusing it there.
func rollbackLeft(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(rctx, "ROLLBACK")
}

// The commit mode is set with the BEGIN (txBegin): in its one
// simple-protocol round trip, or queued ahead of the transaction's first
// statement in its pipeline, never in a round trip of its own.
var (
	durableTx = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit = on"}
	// A count of rejections begins without waiting for the disk and
	// waits only when it gives a tile up (see CountRejectionsUpTo):
	// countDurable, in a round trip of its own before that commit, which
	// waits for the disk anyway.
	countTx      = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit = off"}
	countDurable = "SET LOCAL synchronous_commit = on"
	// A claim relies on READ COMMITTED's recheck of a row another claim
	// marked meanwhile (claimSQL): it says so, whatever the server's
	// default isolation (under which a claim racing another failed with a
	// serialization error instead of taking other tiles).
	//
	// The claim's statement runs on a generic plan, made once per
	// connection where pgx prepares statements (under PgBouncer's
	// transaction pooling, which the exec mode serves, Postgres plans it
	// at each claim): making a custom plan costs about what running the
	// claim does, and the workers' claims take turns (uploader), so
	// planning would be paid in series. The settings hold for the claim's
	// whole transaction (its journal writes too). Its plan does not
	// depend on the values: the flight's candidates in the
	// claim's order from the cursor on, through the index that holds them
	// in that order (TestTheClaimsGenericPlanReadsTheOrdersIndex). JIT is
	// off: the generic plan's estimate of a large flight's rows passes the
	// server's jit_above_cost, and compiling it would take many times
	// what a claim costs.
	claimBegin = txBegin{"BEGIN ISOLATION LEVEL READ COMMITTED", "SET LOCAL synchronous_commit = on",
		"SET LOCAL plan_cache_mode = force_generic_plan", "SET LOCAL jit = off"}
	claimTx = claimBegin.options()
	// A settlement without rejections commits without waiting for the
	// disk: the commit returns before its WAL is written, which a crash may
	// lose because it is re-derived (the batch stays open, the next run
	// resends its key and the provider replays the answer; rejections are
	// keyed by (op_id, tile_id)). A later synchronous commit that writes
	// something (SyncJournal, ClaimBatch, a settlement with rejections)
	// makes every earlier one durable, since WAL is flushed in order.
	//
	// A settlement finds its batch's members through the primary key. On
	// a table of some thousands of tiles the planner, costing pages as if
	// read from disk, could read and hash the whole table instead, once
	// per batch, at many times the cost of the key lookups; settlements
	// (key lookups only) turn sequential scans off.
	//
	// Their statements run on generic plans from the first: a plan made
	// for the values (a custom plan, which Postgres makes for the first
	// five runs of a statement on each connection before it weighs the
	// generic one) finds the same rows by the same keys, and a run's few
	// dozen settlements, spread over its pool's connections, would mostly
	// pay for one.
	settleRelaxedBegin = txBegin{"BEGIN", "SET LOCAL synchronous_commit = off", "SET LOCAL enable_seqscan = off",
		"SET LOCAL plan_cache_mode = force_generic_plan"}
	settleDurableBegin = txBegin{"BEGIN", "SET LOCAL synchronous_commit = on", "SET LOCAL enable_seqscan = off",
		"SET LOCAL plan_cache_mode = force_generic_plan"}
)
