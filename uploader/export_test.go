package uploader

import (
	"context"
	"net/http"
	"time"
)

// Fingerprint is fingerprint, for tests that journal a batch by hand.
var Fingerprint = fingerprint

// ClassifierResends reports whether the one classifier resends a first
// attempt answered with status, header and body.
func ClassifierResends(status int, header http.Header, body []byte) bool {
	return classify(attemptEnd{status: status, header: header, body: body, attempt: 1}, time.Now()).retries()
}

// ReadOperation runs the operation-state request path (GET
// /v1/operations/{op_id}) as an open batch's settling does.
func (u *Client) ReadOperation(ctx context.Context, opID string) error {
	_, _, _, err := u.readOperation(ctx, nil, opID)
	return err
}

// ClientState runs the client-state request path (GET
// /v1/clients/{client_id}/state) as a sequenced run does.
func (u *Client) ClientState(ctx context.Context, client string) (uint64, error) {
	return u.clientState(ctx, nil, client)
}
