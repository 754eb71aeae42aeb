package optable

import (
	"bytes"
	"net/http"
)

// recorder buffers a handler's answer so it can be sealed before the first
// byte reaches the client: a seal that fails must not follow an answer the
// client already has.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

var _ http.ResponseWriter = (*recorder)(nil)

func newRecorder() *recorder { return &recorder{header: make(http.Header)} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.wrote {
		return
	}
	r.status, r.wrote = status, true
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(b)
}

func (r *recorder) outcome() Outcome {
	st := r.status
	if !r.wrote {
		st = http.StatusOK
	}
	h := r.header.Clone()
	if h.Get("Content-Type") == "" && r.body.Len() > 0 {
		// net/http would sniff one at send time; fix it now so the replay
		// sends the same header as the first answer.
		h.Set("Content-Type", http.DetectContentType(r.body.Bytes()))
	}
	return Outcome{Status: st, Header: h, Body: r.body.Bytes(), Failure: st >= 400}
}
