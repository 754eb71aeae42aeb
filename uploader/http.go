package uploader

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// Store is what the HTTP uploader needs from the tile store: the flight, the
// pending tiles, and the batch journal. *tilestore.Store implements it.
type Store interface {
	Flight(ctx context.Context, id string) (tilestore.Flight, error)
	PendingUploads(ctx context.Context, flightID, afterTileID string, limit int) ([]tilestore.Tile, error)
	PendingSummary(ctx context.Context, flightID string) (tiles int, bytes int64, err error)
	ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error)
	TrimUnsentBatch(ctx context.Context, b tilestore.Batch, rs []tilestore.Rejection) error
	AdoptOpenBatches(ctx context.Context, flightID string, dead []string) ([]tilestore.Batch, error)
	OpenBatches(ctx context.Context, flightID string) ([]tilestore.Batch, error)
	Leases(ctx context.Context, flightID string) ([]tilestore.Lease, error)
	ExtendLeases(ctx context.Context) (int, error)
	ReleaseLeases(ctx context.Context) error
	Run() tilestore.Run
	NoteSend(ctx context.Context, opID string) error
	SyncJournal(ctx context.Context, flightID string) error
	SettleBatch(ctx context.Context, s tilestore.Settlement) error
	FailBatch(ctx context.Context, opID string, httpStatus int, detail string) error
	DeferBatch(ctx context.Context, opID string, wait time.Duration) (time.Time, error)
	AtBudget(ctx context.Context, flightID string, maxAttempts int) ([]string, error)
	AmbiguousPending(ctx context.Context, flightID string) ([]tilestore.Tile, time.Time, error)
	MarkUploaded(ctx context.Context, ids []string) (int, error)
}

var _ Store = (*tilestore.Store)(nil)

// tilesByID is an optional Store method: with it, the members of a batch an
// earlier run left open are read directly instead of by paging the flight's
// pending tiles.
type tilesByID interface {
	TilesByID(ctx context.Context, ids []string) ([]tilestore.Tile, error)
}

// BlobSource opens tile bytes by their path relative to the cache root.
// *tilestore.BlobStore implements it.
type BlobSource interface {
	Open(rel string) (*os.File, error)
}

// ClientOptions configures NewClient. BaseURL, Store and Blobs are required.
type ClientOptions struct {
	BaseURL string // e.g. https://provider.example/ (no path after /v1 needed)
	Token   string // bearer token; never logged, never in an error
	Store   Store
	Blobs   BlobSource
	Logger  zerolog.Logger
	// HTTPClient, if set, is used as is (tests); its CheckRedirect is
	// replaced by one that refuses redirects. Default: a pooled client.
	HTTPClient *http.Client
	// TLS, if set, is the default client's TLS settings: extra CA roots
	// and a client certificate (config.Config.ProviderTLS). Default: Go's
	// (the system roots, no client certificate).
	TLS *tls.Config
	// InsecureSkipVerify turns TLS certificate checks off (logs a warning).
	// It applies to the default client only: an HTTPClient brings its own
	// TLS settings.
	InsecureSkipVerify bool
	// RequestTimeout bounds one attempt, answer included. Default 60s.
	RequestTimeout time.Duration
	// FirstContactTimeout bounds the first GET /v1/capabilities, resends
	// included, until the provider has answered once as the API: where
	// nothing answers, the run fails within it with a *NoProviderError
	// instead of spending RequestTimeout on each attempt. Default 8s.
	FirstContactTimeout time.Duration
	// MaxResends is how many times one batch is resent in an inner call
	// (one UploadPendingTiles call of one process) on tilectl's own
	// decision: after a transport failure or a retryable answer that names
	// no wait. Those resends count on across the batch's waits apart in
	// the call; a send the provider asked for by naming a wait never
	// spends it (those are bounded by the provider's max_attempts or the
	// contract table's, the retry budget but after a throttle's advised
	// wait (see ResendBudget), and the deadline; the pacer spaces them). The count
	// starts from none in each call, whatever the journal says the batch
	// was sent before: a batch adopted after a crash is resent again, or
	// it might never be settled. Default 5: with
	// the default 60 s request timeout, 4 inner calls of 6 attempts and
	// their backoffs fit the default 30 m deadline (25m16s); a batch whose
	// resends run out stays open and the next inner call resends it under
	// the same key, so a lower number loses nothing.
	MaxResends int
	// MaxRetryDelay caps one wait between resends; a server asking for
	// more gives the batch up. Default 5 minutes.
	MaxRetryDelay time.Duration
	// MaxResponseBytes caps how much of an answer is read. Default 8 MiB.
	MaxResponseBytes int64
	// CacheDirSource says where the blob cache's directory was configured
	// ("flag --cache-dir", "environment TILECTL_CACHE_DIR", ...), for the
	// error that stops a run whose blobs are all missing. Default "".
	CacheDirSource string
	// UserAgent, default "tilectl/<Version>".
	UserAgent string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Sleep waits between resends. Default: operation.Sleep.
	Sleep func(ctx context.Context, d time.Duration) error
	// Breaker tunes the circuit breaker that all of this uploader's
	// requests share (one uploader serves one run).
	Breaker BreakerOptions
	// ResendBudget is the retry budget's initial tokens: resends across
	// the uploader's life are at most ResendBudget + ResendRatio x first
	// attempts (see operation.RetryBudget). A resend after a throttle (429,
	// 503) whose Retry-After names a wait ahead, or whose retry extension's
	// wait is a second or more, takes none; every other resend takes one,
	// the provider's asked-for ones included. Default 10; negative means 0.
	ResendBudget float64
	// ResendRatio is the tokens each first attempt adds. Default 0.2;
	// negative means 0.
	ResendRatio float64
	// Jitter randomises tilectl's own backoff before resending after no
	// answer or a lost one (TransportBackoff: exponential from 500 ms by
	// the attempt's number, capped at 30 s). A timed-out request backs off
	// from its first resend; after a broken connection or a lost answer
	// the first resend goes at once and the backoff starts at the second.
	// Default operation.JitterNone. Waits a provider asked for
	// (Retry-After, the retry extension) are kept as asked.
	Jitter operation.JitterKind
	// Rand is the jitter's random source; tests pass a seeded one.
	// Default: nil, the global source.
	Rand *rand.Rand
	// ClientID, when set, turns on strict client sequencing
	// (docs/provider-api.md): every batch carries Client-Id and a
	// Client-Sequence journaled with it, one batch in flight at a time.
	// The Store must then implement SequenceStore. Default: unset.
	ClientID string
	// MaxConcurrency bounds the adaptive limit on batches in flight that a
	// Request with Concurrency 0 uses (concurrency.Controller). Default
	// 256.
	MaxConcurrency int
	// Liveness, if set, proves at once whether another run of this machine
	// holding the flight's open batches is alive (tilestore.RunLocks): a
	// dead one's batches are adopted without waiting for their lease.
	// Without it, or when it cannot tell (an error: logged once), only
	// leases decide.
	Liveness RunLiveness
	// Pace, if set, paces the bytes of every batch body as they are
	// written (a bandwidth limit every batch of the uploader shares).
	// Default: nil, no limit.
	Pace BodyLimiter
	// DialContext, if set, opens the connections of the default
	// transport (one that counts what they carry, say). Ignored with
	// HTTPClient. Default: net/http's dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// WrapTransport, if set, wraps the default transport (to follow each
	// request's events, say). Ignored with HTTPClient. Default: none.
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// DefaultMaxResends is ClientOptions.MaxResends's default, for bounding a
// run's worst case.
const DefaultMaxResends = defaultMaxResends

// TransportBackoff is the wait before the n-th resend after a broken
// connection or a lost answer, before jitter: exponential from 500 ms,
// capped at 30 s.
func TransportBackoff(j operation.JitterKind) operation.Backoff {
	return operation.Backoff{Base: 500 * time.Millisecond, Cap: 30 * time.Second, Jitter: j}
}

// Version is the client version in the default User-Agent; the build sets it.
var Version = "dev"

const (
	defaultRequestTimeout   = 60 * time.Second
	defaultFirstContact     = 8 * time.Second
	defaultMaxResends       = 5
	defaultMaxRetryDelay    = 5 * time.Minute
	defaultMaxResponseBytes = 8 << 20
	defaultConcurrency      = 4
	defaultResendBudget     = 10
	defaultResendRatio      = 0.2
)

// Client uploads tiles to a provider that speaks docs/provider-api.md.
// It is safe for concurrent use, and any number of runs, in this process or
// others, may upload one flight at once: each claims its own batches from
// the store (Store.ClaimBatch) under its run's lease.
type Client struct {
	base     *url.URL
	token    string
	store    Store
	blobs    BlobSource
	log      zerolog.Logger
	client   *http.Client
	timeout  time.Duration
	resends  int
	maxDelay time.Duration
	maxBody  int64
	ua       string
	// cacheDirSource is ClientOptions.CacheDirSource.
	cacheDirSource string
	now            func() time.Time
	sleep          func(ctx context.Context, d time.Duration) error
	breaker        *breaker
	budget         *operation.RetryBudget
	jitter         operation.JitterKind
	randMu         sync.Mutex // rand.Rand is not safe for concurrent use
	rand           *rand.Rand
	// answered is set once the provider answered as the API: from then on
	// a failure is an outage, given the full resends, not a wrong URL.
	answered atomic.Bool
	// firstContact bounds the capabilities request until answered is set
	// (ClientOptions.FirstContactTimeout).
	firstContact time.Duration
	// clientID is ClientOptions.ClientID; stream its sequence stream, set
	// by prepareSequence at the start of each run.
	clientID string
	stream   atomic.Int64
	// noLookups, noOperations are set once the provider answered a tile
	// lookup, or GET /v1/operations/{op_id}, with a 404 the contract does
	// not give that route: the run has said so (unrouted).
	noLookups, noOperations atomic.Bool
	// adaptive is the limit on batches in flight of the runs that set no
	// fixed one; it learns from every batch attempt and breaker opening,
	// and carries what it learnt from one call to the next.
	adaptive *concurrency.Controller
	// pacer spaces the starts of all of this uploader's requests when the
	// provider throttles (pacer.go); the sender asks it before every
	// attempt and tells it every verdict.
	pacer          *pacer
	liveness       RunLiveness // ClientOptions.Liveness; nil: leases decide
	livenessWarned atomic.Bool // a failed liveness check was logged
	pace           BodyLimiter // ClientOptions.Pace; nil: no limit
	// warm opens the default transport's connections ahead of the
	// batches that will need them (warm.go); nil with
	// ClientOptions.HTTPClient.
	warm *warmDialer
	// wrapGate, when set (by tests), wraps the gate of each call
	// (gateFor): a test sees the call's waits for a slot.
	wrapGate func(gate) gate
}

var _ TileUploader = (*Client)(nil)

// NewClient checks opts and builds the uploader.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.BaseURL == "" {
		return nil, errors.New("new HTTP uploader: provider base URL is empty")
	}
	base, err := url.Parse(opts.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("new HTTP uploader: provider URL %q is not an http(s) URL", opts.BaseURL)
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	if opts.Store == nil || opts.Blobs == nil {
		return nil, errors.New("new HTTP uploader: Store and Blobs are required")
	}
	u := &Client{
		base: base, token: opts.Token, store: opts.Store, blobs: opts.Blobs, log: opts.Logger,
		timeout: opts.RequestTimeout, firstContact: opts.FirstContactTimeout, resends: opts.MaxResends, maxDelay: opts.MaxRetryDelay,
		maxBody: opts.MaxResponseBytes, ua: opts.UserAgent, now: opts.Now, sleep: opts.Sleep,
		cacheDirSource: opts.CacheDirSource, clientID: opts.ClientID, liveness: opts.Liveness,
		pace: opts.Pace,
	}
	if u.clientID != "" {
		if _, err := u.seqStore(); err != nil {
			return nil, fmt.Errorf("new HTTP uploader: %w", err)
		}
	}
	if u.timeout <= 0 {
		u.timeout = defaultRequestTimeout
	}
	if u.firstContact <= 0 {
		u.firstContact = defaultFirstContact
	}
	if u.resends <= 0 {
		u.resends = defaultMaxResends
	}
	if u.maxDelay <= 0 {
		u.maxDelay = defaultMaxRetryDelay
	}
	if u.maxBody <= 0 {
		u.maxBody = defaultMaxResponseBytes
	}
	if u.ua == "" {
		u.ua = "tilectl/" + Version
	}
	if u.now == nil {
		u.now = time.Now
	}
	if u.sleep == nil {
		u.sleep = operation.Sleep
	}
	u.adaptive = concurrency.New(concurrency.Options{Max: opts.MaxConcurrency, Now: u.now})
	u.pacer = newPacer(u.now, u.sleep)
	bo := opts.Breaker
	onChange := bo.OnChange
	bo.OnChange = func(e BreakerEvent) {
		if e.State == BreakerOpen {
			u.adaptive.Overloaded()
		}
		if onChange != nil {
			onChange(e)
		}
	}
	u.breaker = newBreaker(bo, u.now, u.sleep)
	u.jitter, u.rand = opts.Jitter, opts.Rand
	initial, ratio := opts.ResendBudget, opts.ResendRatio
	if initial == 0 {
		initial = defaultResendBudget
	}
	if ratio == 0 {
		ratio = defaultResendRatio
	}
	initial, ratio = max(initial, 0), max(ratio, 0)
	// The bucket holds at most what 10x the initial burst (or 100) allows,
	// so a long healthy run does not bank a burst for a later outage.
	if u.budget, err = operation.NewRetryBudget(initial, ratio, max(10*initial, 100)); err != nil {
		return nil, fmt.Errorf("new HTTP uploader: %w", err)
	}
	dial := opts.DialContext
	if opts.HTTPClient == nil {
		u.warm = newWarmDialer(dial, u.now)
		if base.Scheme == "https" {
			// The provider may choose HTTP/2: nothing is dialed ahead
			// until an answer shows it did not.
			u.warm.awaitProtocol()
		}
		dial = u.warm.DialContext
	}
	u.client = buildClient(opts.HTTPClient, dial, opts.WrapTransport, opts.TLS, opts.InsecureSkipVerify, u.timeout)
	if opts.InsecureSkipVerify {
		u.log.Warn().Str("provider", base.Redacted()).Msg("TLS certificate verification is OFF for the provider (--insecure-skip-verify)")
	}
	return u, nil
}

// buildClient is the uploader's client: c as given, or a clone of
// net/http's default transport (so the standard proxy variables apply:
// Proxy is http.ProxyFromEnvironment) with tlsConf's roots and client
// certificate, dialing with dial and wrapped in wrap when set.
func buildClient(c *http.Client, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	wrap func(http.RoundTripper) http.RoundTripper,
	tlsConf *tls.Config, insecure bool, timeout time.Duration) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Every batch in flight keeps its connection for the next one: a
		// connection closed after its answer costs the next batch a new
		// handshake, a round trip or two on a long link, and the
		// controller may keep up to its most batches in flight.
		tr.MaxIdleConnsPerHost = concurrency.DefaultMax
		tr.MaxIdleConns = concurrency.DefaultMax
		if dial != nil {
			tr.DialContext = dial
		}
		if tlsConf != nil {
			tr.TLSClientConfig = tlsConf.Clone()
		}
		if insecure {
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{}
			}
			tr.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // the operator asked for it, and is warned
		}
		out.Transport = tr
		if wrap != nil {
			out.Transport = wrap(tr)
		}
	}
	if out.Timeout == 0 {
		out.Timeout = timeout
	}
	// A redirect is never followed: the body is a one-shot stream, the
	// bearer token must not travel to another host, and the contract has no
	// redirects. The 3xx is handed back and treated as an error.
	out.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &out
}

// ConfirmFlightState returns nil when the flight is on_ground, a
// *FlightStateNotOnGroundError when it is not, and an error matching
// tilestore.ErrFlightNotFound when there is no such flight.
func (u *Client) ConfirmFlightState(ctx context.Context, flightID string) error {
	f, err := u.store.Flight(ctx, flightID)
	if errors.Is(err, tilestore.ErrFlightNotFound) {
		return fmt.Errorf("flight %s is not known to the tile store (import its tiles first): %w", flightID, err)
	}
	if err != nil {
		return fmt.Errorf("confirm state of flight %s: %w", flightID, err)
	}
	if f.State != tilestore.FlightOnGround {
		return &FlightStateNotOnGroundError{FlightID: flightID, State: f.State}
	}
	return nil
}

// pageSize is how many pending tiles one PendingUploads call returns.
const pageSize = 500

// EnumeratePendingTiles yields the flight's uploadable tiles in tile_id
// order, one page in memory at a time. An error ends the sequence.
func (u *Client) EnumeratePendingTiles(ctx context.Context, flightID string) iter.Seq2[tilestore.Tile, error] {
	return pendingTiles(ctx, u.store, flightID, pageSize)
}

func pendingTiles(ctx context.Context, s Store, flightID string, limit int) iter.Seq2[tilestore.Tile, error] {
	return func(yield func(tilestore.Tile, error) bool) {
		after := ""
		for {
			page, err := s.PendingUploads(ctx, flightID, after, limit)
			if err != nil {
				yield(tilestore.Tile{}, err)
				return
			}
			for _, t := range page {
				if !yield(t, nil) {
					return
				}
			}
			if len(page) < limit {
				return
			}
			after = page[len(page)-1].ID
		}
	}
}

func (u *Client) endpoint(path string) string {
	return u.base.String() + path
}
