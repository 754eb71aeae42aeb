package operation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// MaxErrorBodyBytes is the most of an error body that is read or parsed.
// Real error bodies are a few hundred bytes; a larger one is an HTML page or
// something worse, and is handled by its status code alone.
const MaxErrorBodyBytes = 64 << 10

// ErrErrorBodyTooLarge is returned by ParseErrorBody for a body above
// MaxErrorBodyBytes.
var ErrErrorBodyTooLarge = errors.New("error body too large")

// ErrorBody is the JSON body of any non-2xx answer (docs/provider-api.md).
type ErrorBody struct {
	Errors     []ErrorItem `json:"errors"`
	Extensions []Extension `json:"extensions,omitempty"`
}

// ErrorItem is one entry of an error body's "errors".
type ErrorItem struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details,omitempty"`
}

// Extension is one entry of an error body's "extensions".
type Extension struct {
	URN  string          `json:"urn"`
	Data json.RawMessage `json:"data,omitempty"`
}

// ParseErrorBody decodes an error body. Unknown fields are ignored; a field
// of the wrong type, trailing data or a body above MaxErrorBodyBytes is an
// error, so that an HTML page or a cut body is never mistaken for advice.
// It never panics, whatever the bytes.
func ParseErrorBody(b []byte) (ErrorBody, error) {
	if len(b) > MaxErrorBodyBytes {
		return ErrorBody{}, fmt.Errorf("parse error body: %w (%d bytes, limit %d)", ErrErrorBodyTooLarge, len(b), MaxErrorBodyBytes)
	}
	var eb ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		return ErrorBody{}, fmt.Errorf("parse error body: %w", err)
	}
	return eb, nil
}

// ReadErrorBody reads at most MaxErrorBodyBytes+1 bytes from r and parses
// them, so a huge body costs bounded memory.
func ReadErrorBody(r io.Reader) (ErrorBody, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxErrorBodyBytes+1))
	if err != nil {
		return ErrorBody{}, fmt.Errorf("read error body: %w", err)
	}
	return ParseErrorBody(b)
}

// Code is the first error's code, or "" when there is none.
func (e ErrorBody) Code() string {
	if len(e.Errors) == 0 {
		return ""
	}
	return e.Errors[0].Code
}

// Message is the first error's message, or "" when there is none.
func (e ErrorBody) Message() string {
	if len(e.Errors) == 0 {
		return ""
	}
	return e.Errors[0].Message
}

// Retry returns the first retry extension whose data parses. An extension
// with invalid data is ignored (the defaults then apply), as the API asks
// clients to handle what the page leaves open defensively.
func (e ErrorBody) Retry() (RetryExtension, bool) {
	for _, x := range e.Extensions {
		if x.URN != RetryExtensionURN {
			continue
		}
		ext, err := ParseRetryExtension(x.Data)
		if err != nil {
			continue
		}
		return ext, true
	}
	return RetryExtension{}, false
}

// WriteError writes an error body of the API's shape with the given status.
// With retry != nil it adds the retry extension and, when the retry is
// allowed after a delay, a Retry-After header in whole seconds (rounded up)
// for clients that read only headers. details, when not nil, goes into the
// error's "details"; a value that cannot be marshalled is left out rather
// than turning the error into a 500.
func WriteError(w http.ResponseWriter, status int, code, message string, retry *RetryExtension, details any) {
	item := ErrorItem{Code: code, Message: message}
	if details != nil {
		if raw, err := json.Marshal(details); err == nil {
			item.Details = raw
		}
	}
	body := ErrorBody{Errors: []ErrorItem{item}}
	if retry != nil {
		if data, err := json.Marshal(*retry); err == nil {
			body.Extensions = []Extension{{URN: RetryExtensionURN, Data: data}}
		}
		if retry.Allowed && retry.After > 0 {
			secs := retry.After / time.Second
			if retry.After%time.Second != 0 {
				secs++ // round up without the overflow of After+Second-1
			}
			w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		// Only strings and RawMessages that came from json.Marshal: cannot fail.
		b = []byte(`{"errors":[{"code":"INTERNAL_ERROR","message":"error body could not be encoded"}]}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
