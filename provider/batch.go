package provider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// manifestTile is one manifest entry as docs/provider-api.md defines it. The
// uploader declares its own copy on purpose: the reference provider is an
// independent reading of the contract, so a shared type could not catch a
// field that both sides get wrong the same way.
type manifestTile struct {
	TileID      string `json:"tile_id"`
	Z           int    `json:"z"`
	X           int64  `json:"x"`
	Y           int64  `json:"y"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	CapturedAt  string `json:"captured_at"`
}

type batchManifest struct {
	Tiles []manifestTile `json:"tiles"`
}

type tileResult struct {
	TileID  string `json:"tile_id"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

type batchAnswer struct {
	OpID    string       `json:"op_id"`
	Results []tileResult `json:"results"`
}

const maxManifestBytes = 8 << 20

// errBadRequest marks a body that is not what the contract asks for (as
// opposed to one that was cut off in transit).
var errBadRequest = errors.New("invalid request")

// openMultipart reads the manifest part, the first of the body.
func openMultipart(r *http.Request, body io.Reader) (*multipart.Reader, batchManifest, error) {
	var m batchManifest
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, m, fmt.Errorf("%w: Content-Type must be multipart/form-data with a boundary", errBadRequest)
	}
	mr := multipart.NewReader(body, params["boundary"])
	p, err := mr.NextPart()
	if err != nil {
		return nil, m, classifyBodyErr(err, "read manifest part")
	}
	if p.FormName() != "manifest" {
		return nil, m, fmt.Errorf("%w: the first part must be named manifest, got %q", errBadRequest, p.FormName())
	}
	raw, err := io.ReadAll(io.LimitReader(p, maxManifestBytes+1))
	if err != nil {
		return nil, m, classifyBodyErr(err, "read manifest")
	}
	if len(raw) > maxManifestBytes {
		return nil, m, fmt.Errorf("%w: manifest over %d bytes", errBadRequest, maxManifestBytes)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, m, fmt.Errorf("%w: manifest is not valid JSON: %v", errBadRequest, err)
	}
	return mr, m, nil
}

// classifyBodyErr separates a malformed body (400, final) from one that
// broke off in transit (retryable: the client will resend the same key).
func classifyBodyErr(err error, doing string) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return fmt.Errorf("%s: %w", doing, err)
	case errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(err.Error(), "connection"), errors.Is(err, io.EOF) && doing == "read manifest part":
		return fmt.Errorf("%s: body incomplete: %w", doing, err)
	}
	return fmt.Errorf("%w: %s: %v", errBadRequest, doing, err)
}

// fingerprint is the idempotency fingerprint of a batch: the flight, then
// each tile_id and sha256 in manifest order. It reads only the manifest
// part and puts the bytes it consumed back in front of the rest of the
// body, so the handler reads the request whole.
func (s *Server) fingerprint(r *http.Request) (string, error) {
	var consumed bytes.Buffer
	orig := r.Body
	_, m, err := openMultipart(r, io.TeeReader(orig, &consumed))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(consumed.Bytes()), orig), orig}
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(r.PathValue("flight_id")))
	for _, t := range m.Tiles {
		h.Write([]byte{0})
		h.Write([]byte(t.TileID))
		h.Write([]byte{0})
		h.Write([]byte(t.SHA256))
	}
	fp := hex.EncodeToString(h.Sum(nil))
	if key, err := operation.ParseIdempotencyKey(r.Header.Get(operation.HeaderIdempotencyKey)); err == nil {
		if err := s.tiles.noteFingerprint(r.Context(), callerOf(r), key, fp); err != nil {
			s.log.Warn().Err(err).Msg("record fingerprint")
		}
	}
	return fp, nil
}

// batch runs one batch: every tile is checked, stored or rejected, and the
// answer names each manifest tile once, in manifest order.
func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	flightID := r.PathValue("flight_id")
	opID, _ := operation.ParseIdempotencyKey(r.Header.Get(operation.HeaderIdempotencyKey))
	s.metrics.running.Inc()
	defer s.metrics.running.Dec()
	if s.cfg.BeforeRun != nil {
		s.cfg.BeforeRun(opID)
	}
	mr, m, err := openMultipart(r, r.Body)
	if err != nil {
		s.writeBodyError(w, err)
		return
	}
	if err := s.checkManifest(m); err != nil {
		s.writeBodyError(w, err)
		return
	}
	results := make([]tileResult, 0, len(m.Tiles))
	var rejIDs, rejReasons []string
	for _, mt := range m.Tiles {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: body ends before the part of tile %s", errBadRequest, mt.TileID)
		}
		if err != nil {
			s.writeBodyError(w, classifyBodyErr(err, "read tile part"))
			return
		}
		if p.FormName() != mt.TileID {
			s.writeBodyError(w, fmt.Errorf("%w: part %q where the manifest has %q next", errBadRequest, p.FormName(), mt.TileID))
			return
		}
		data, err := io.ReadAll(io.LimitReader(p, s.limits.MaxTileBytes+1))
		if err == nil {
			_, err = io.Copy(io.Discard, p) // the rest of an oversized part
		}
		if err != nil {
			s.writeBodyError(w, classifyBodyErr(err, "read tile "+mt.TileID))
			return
		}
		res, err := s.answer(ctx, opID, flightID, mt, data)
		if err != nil {
			// Whether the tile is held is unknown, so no result can be
			// given for it: the batch is not sealed (5xx is transient for
			// the idempotency table) and the resend runs it again.
			s.log.Error().Err(err).Str("op_id", opID).Msg("look up tile")
			operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable,
				"storage is unavailable; send the batch again with the same key",
				&operation.RetryExtension{Allowed: true, After: time.Second, Strategy: operation.StrategyExponential}, nil)
			return
		}
		if res.Status == "rejected" {
			rejIDs, rejReasons = append(rejIDs, res.TileID), append(rejReasons, res.Reason)
		}
		s.metrics.tiles.WithLabelValues(res.Status).Inc()
		results = append(results, res)
	}
	if err := s.tiles.noteRejections(ctx, opID, rejIDs, rejReasons); err != nil {
		s.log.Warn().Err(err).Msg("ledger")
	}
	if faultOf(ctx) == FaultOmitResults && len(results) > 0 {
		i := s.faults.intn(len(results))
		results = append(results[:i:i], results[i+1:]...)
	}
	s.metrics.batches.Inc()
	writeJSON(w, http.StatusOK, batchAnswer{OpID: opID, Results: results})
}

// answer decides one tile's result. A tile held with the bytes its
// manifest entry names is duplicate, before any check or injected fault:
// a batch that runs again under its key (its first execution interrupted
// after storing some tiles) answers what it holds duplicate, as
// docs/provider-api.md says, and never rejected. Any other tile is judged, and
// stored when it passes. The error is a failed lookup: whether the tile is
// held is then unknown.
func (s *Server) answer(ctx context.Context, opID, flightID string, mt manifestTile, data []byte) (tileResult, error) {
	sum := strings.ToLower(mt.SHA256)
	h, err := s.tiles.get(ctx, flightID, mt.TileID)
	switch {
	case err == nil && h.SHA256 == sum:
		return tileResult{TileID: mt.TileID, Status: "duplicate"}, nil
	case err != nil && !errors.Is(err, errTileNotHeld):
		return tileResult{}, err
	}
	if res := s.judge(mt, data); res.Status != "" {
		return res, nil
	}
	st, err := s.tiles.put(ctx, opID, flightID, mt.TileID, sum, data, s.now())
	if err == nil && s.faults.losesStoreAnswer(mt.TileID) {
		err = errors.New("injected: the answer to the tile record's commit was lost")
	}
	if err != nil {
		// put makes a tile visible in the transaction that records its
		// write, so a put that fails has stored nothing, unless only its
		// commit's answer was lost: the record of this operation's write
		// says which. Unknown, the tile has no result (an error: the
		// batch is not sealed and runs again).
		s.log.Error().Err(err).Str("op_id", opID).Msg("store tile")
		wrote, werr := s.tiles.wrote(ctx, opID, flightID, mt.TileID, sum)
		switch {
		case werr != nil:
			return tileResult{}, fmt.Errorf("store tile %s: %v; and look for its record: %w", mt.TileID, err, werr)
		case wrote:
			return tileResult{TileID: mt.TileID, Status: "accepted"}, nil
		}
		return tileResult{TileID: mt.TileID, Status: "rejected", Reason: "storage_busy", Message: "the tile could not be stored; send it again"}, nil
	}
	return tileResult{TileID: mt.TileID, Status: st}, nil
}

func (s *Server) checkManifest(m batchManifest) error {
	if len(m.Tiles) == 0 {
		return fmt.Errorf("%w: the manifest lists no tiles", errBadRequest)
	}
	if len(m.Tiles) > s.limits.MaxBatchTiles {
		return &tooLargeError{fmt.Sprintf("%d tiles is over max_batch_tiles %d", len(m.Tiles), s.limits.MaxBatchTiles)}
	}
	seen := make(map[string]bool, len(m.Tiles))
	for _, t := range m.Tiles {
		if t.TileID == "" || len(t.TileID) > 256 {
			return fmt.Errorf("%w: a tile_id is empty or too long", errBadRequest)
		}
		if seen[t.TileID] {
			return fmt.Errorf("%w: tile_id %s is listed twice", errBadRequest, t.TileID)
		}
		seen[t.TileID] = true
	}
	return nil
}

type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string { return e.msg }

func (s *Server) writeBodyError(w http.ResponseWriter, err error) {
	var tl *tooLargeError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &tl):
		operation.WriteError(w, http.StatusRequestEntityTooLarge, operation.CodeBatchTooLarge, tl.msg, nil, nil)
	case errors.As(err, &mbe):
		operation.WriteError(w, http.StatusRequestEntityTooLarge, operation.CodeBatchTooLarge,
			fmt.Sprintf("body is over max_batch_bytes %d", s.limits.MaxBatchBytes), nil, nil)
	case errors.Is(err, errBadRequest):
		operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest, err.Error(), nil, nil)
	default:
		// Cut off in transit: not sealed (5xx is transient for the
		// idempotency table), so the client's resend runs it again.
		operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, err.Error(),
			&operation.RetryExtension{Allowed: true, After: 0, Strategy: operation.StrategyImmediate}, nil)
	}
}
