package security

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	hostileDeadline = 3 * time.Second
	// hostileMargin covers process start, the database and shutdown.
	hostileMargin = 7 * time.Second
	// maxRSS bounds the peak resident memory of a run; the hostile bodies
	// are far larger, so reading one whole would blow through it.
	maxRSS = 200 << 20
)

// A hostile handler misbehaves until the request ends or quit closes (an
// unread request body keeps the server from noticing the client left).
type hostile func(w http.ResponseWriter, r *http.Request, quit <-chan struct{})

func stopped(r *http.Request, quit <-chan struct{}) bool {
	select {
	case <-r.Context().Done():
		return true
	case <-quit:
		return true
	default:
		return false
	}
}

// endless writes a never-ending JSON-looking body.
func endless(w http.ResponseWriter, r *http.Request, quit <-chan struct{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	_, _ = w.Write([]byte(`{"api_version":"v1","padding":"`))
	chunk := []byte(strings.Repeat("A", 64<<10))
	for !stopped(r, quit) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// huge declares and starts sending a 4 GiB body.
func huge(w http.ResponseWriter, r *http.Request, quit <-chan struct{}) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "4294967296")
	w.WriteHeader(200)
	chunk := []byte(strings.Repeat("[", 64<<10))
	for !stopped(r, quit) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// drip sends one byte every 100 ms, forever.
func drip(w http.ResponseWriter, r *http.Request, quit <-chan struct{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	for !stopped(r, quit) {
		if _, err := w.Write([]byte(" ")); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// silent accepts the request and never answers.
func silent(_ http.ResponseWriter, r *http.Request, quit <-chan struct{}) {
	select {
	case <-r.Context().Done():
	case <-quit:
	}
}

// TestHostileProviderCannotExhaustMemoryOrOutlastDeadline serves endless,
// huge, slow-dripped and silent answers, on the capabilities call and on
// the batch call, and checks each run ends by --deadline plus a margin with
// bounded peak memory and no tile marked uploaded.
func TestHostileProviderCannotExhaustMemoryOrOutlastDeadline(t *testing.T) {
	handlers := map[string]hostile{"endless": endless, "huge": huge, "drip": drip, "silent": silent}
	for name, h := range handlers {
		for _, where := range []string{"capabilities", "batch"} {
			t.Run(name+"/"+where, func(t *testing.T) {
				t.Parallel()
				fake := &fakeProvider{}
				quit := make(chan struct{})
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					isCaps := strings.HasSuffix(r.URL.Path, "/capabilities")
					isBatch := strings.HasSuffix(r.URL.Path, "/tiles:batch")
					if (where == "capabilities" && isCaps) || (where == "batch" && (isBatch || strings.Contains(r.URL.Path, "/operations/"))) {
						h(w, r, quit)
						return
					}
					fake.ServeHTTP(w, r)
				}))
				defer srv.Close()
				defer srv.CloseClientConnections()
				defer close(quit)
				c := newCLI(t, srv.URL, "hostile-token-0123456789")
				c.importFlight("hostile", 2)
				r := c.run(hostileDeadline+30*time.Second, "upload-pending", "--flight", "hostile", "-o", "json",
					"--deadline", hostileDeadline.String())
				checkBounded(t, r)
				if r.exit == 0 {
					t.Errorf("a run against a %s provider exited 0", name)
				}
				if n := c.count(`SELECT count(*) FROM tiles WHERE voting_status = 'uploaded'`); n != 0 {
					t.Errorf("%d tiles marked uploaded from a %s answer", n, name)
				}
			})
		}
	}
}

// TestRedirectToAnotherHostIsNotFollowedWithTheToken answers every call
// with a redirect to a different host name: tilectl must not send its
// token there, and must end by its deadline.
func TestRedirectToAnotherHostIsNotFollowedWithTheToken(t *testing.T) {
	const token = "redirect-token-5f4e3d2c1b0a"
	var leaked, reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if strings.Contains(r.Header.Get("Authorization"), token) {
			leaked.Add(1)
		}
		(&fakeProvider{}).ServeHTTP(w, r)
	}))
	defer other.Close()
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, otherURL+r.URL.RequestURI(), code)
			}))
			defer srv.Close()
			c := newCLI(t, srv.URL, token)
			c.importFlight("redirected", 2)
			r := c.run(hostileDeadline+30*time.Second, "upload-pending", "--flight", "redirected", "-o", "json",
				"--deadline", hostileDeadline.String())
			checkBounded(t, r)
			if r.exit == 0 {
				t.Errorf("a run whose provider only redirects exited 0")
			}
			if n := leaked.Load(); n != 0 {
				t.Fatalf("the token was sent to the redirect target %d time(s)", n)
			}
			if n := c.count(`SELECT count(*) FROM tiles WHERE voting_status = 'uploaded'`); n != 0 {
				t.Errorf("%d tiles marked uploaded through a redirect", n)
			}
		})
	}
	t.Logf("redirect target reached %d time(s) (without the token)", reached.Load())
}

func checkBounded(t *testing.T, r runResult) {
	t.Helper()
	if r.took > hostileDeadline+hostileMargin {
		t.Errorf("run took %v with --deadline %v (margin %v)\nstderr: %s", r.took.Round(time.Millisecond), hostileDeadline, hostileMargin, clipped(r.stderr))
	}
	if r.maxRSS > maxRSS {
		t.Errorf("peak RSS %d MiB, want at most %d MiB", r.maxRSS>>20, maxRSS>>20)
	}
	if r.maxRSS == 0 {
		t.Errorf("no peak RSS measured")
	}
	t.Logf("exit %d in %v, peak RSS %.1f MiB", r.exit, r.took.Round(time.Millisecond), float64(r.maxRSS)/(1<<20))
}

func clipped(s string) string {
	if len(s) > 2000 {
		return s[:1000] + "\n...\n" + s[len(s)-1000:]
	}
	return s
}
