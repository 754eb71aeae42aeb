package uploader

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/provider/providertest"
)

// Opening a connection is not a round trip of the path's queue: the
// adaptive limit learns a batch's round trip from when its connection was
// there, so a link whose handshakes are slow (every batch here opens a
// connection that takes 300 ms to set up) is not read as queueing.
func TestAdaptiveLimitLearnsRoundTripsWithoutTheConnectionSetup(t *testing.T) {
	t.Parallel()
	const setup = 300 * time.Millisecond
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fdial")
	c.AddTiles(t, "fdial", 6, 512, 73)
	var d net.Dialer
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		select {
		case <-time.After(setup):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	u, err := NewClient(ClientOptions{BaseURL: p.URL, Token: providertest.Token, Store: c.Store, Blobs: c.Blobs,
		Logger: zerolog.Nop(), RequestTimeout: 10 * time.Second, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := u.UploadPendingTiles(ctx, Request{FlightID: "fdial", BatchSize: 1})
	if err != nil || rep.Accepted != 6 {
		t.Fatalf("UploadPendingTiles: accepted %d, err %v; want 6", rep.Accepted, err)
	}
	if st := u.adaptive.State(); st.Base >= setup/2 || st.SRTT >= setup/2 {
		t.Fatalf("least round trip %v, smoothed %v over a loopback provider: the connection setup (%v) counted as queueing",
			st.Base, st.SRTT, setup)
	}
}
