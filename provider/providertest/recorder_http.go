package providertest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tilectl/tilectl/operation"
)

// The Recorder's handlers: docs/provider-api.md's batch, operation state and
// tile lookup, over what the Recorder holds.

func recorderJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func recorderError(w http.ResponseWriter, status int, code, msg string) {
	recorderJSON(w, status, map[string]any{"errors": []any{map[string]any{"code": code, "message": msg}}})
}

// bare404 is what a gateway or a server without the route answers.
func bare404(w http.ResponseWriter) { http.Error(w, "404 page not found", http.StatusNotFound) }

func (p *Recorder) operation(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	ans, ok := p.answers[r.PathValue("op")]
	expired := p.expired[r.PathValue("op")]
	unrouted := p.noOperations
	p.mu.Unlock()
	if unrouted {
		bare404(w)
		return
	}
	if expired {
		recorderJSON(w, 200, map[string]any{"op_id": r.PathValue("op"), "state": "expired"})
		return
	}
	if !ok {
		recorderJSON(w, 200, map[string]any{"op_id": r.PathValue("op"), "state": "absent"})
		return
	}
	recorderJSON(w, 200, map[string]any{"op_id": r.PathValue("op"), "state": "sealed",
		"outcome": map[string]any{"status": 200, "body": json.RawMessage(ans)}})
}

func (p *Recorder) lookup(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookups++
	if p.noLookups {
		bare404(w)
		return
	}
	id := r.PathValue("tile")
	h, ok := p.held[id]
	if !ok {
		operation.WriteError(w, http.StatusNotFound, operation.CodeTileNotFound, "no such tile", nil, nil)
		return
	}
	recorderJSON(w, 200, map[string]any{"tile_id": id, "sha256": h.sha256, "size": h.size, "received_at": "2026-11-22T10:00:00Z"})
}

type recorderResult struct {
	TileID  string `json:"tile_id"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

func (p *Recorder) batch(w http.ResponseWriter, r *http.Request) {
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	p.mu.Lock()
	p.posts++
	km := p.keyMu[key]
	if km == nil {
		km = &sync.Mutex{}
		p.keyMu[key] = km
	}
	p.mu.Unlock()
	// One request per key at a time: a concurrent resend waits, then replays.
	km.Lock()
	defer km.Unlock()
	p.mu.Lock()
	ans, ok := p.answers[key]
	expired, cut := p.expired[key], p.cut[key]
	p.mu.Unlock()
	if expired {
		operation.WriteError(w, http.StatusUnprocessableEntity, operation.CodeIdempotencyExpired, "key expired", nil, nil)
		return
	}
	if ok {
		w.Header().Set("Idempotent-Replayed", "true")
		writeAnswer(w, ans, cut)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		recorderError(w, 400, "INVALID_REQUEST", err.Error())
		return
	}
	var man struct {
		Tiles []struct {
			TileID string `json:"tile_id"`
			SHA256 string `json:"sha256"`
		} `json:"tiles"`
	}
	sums, sizes := map[string]string{}, map[string]int{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			recorderError(w, 400, "INVALID_REQUEST", err.Error())
			return
		}
		b, _ := io.ReadAll(part)
		if part.FormName() != "manifest" {
			h := sha256.Sum256(b)
			sums[part.FormName()], sizes[part.FormName()] = hex.EncodeToString(h[:]), len(b)
			continue
		}
		if err := json.Unmarshal(b, &man); err != nil {
			recorderError(w, 400, "INVALID_REQUEST", err.Error())
			return
		}
		p.mu.Lock()
		for _, mt := range man.Tiles {
			p.carried[mt.TileID]++
		}
		p.mu.Unlock()
	}
	time.Sleep(p.latency) // the satellite link's round trip
	p.mu.Lock()
	defer p.mu.Unlock()
	how := ""
	if p.lose != nil {
		ids := make([]string, len(man.Tiles))
		for i, mt := range man.Tiles {
			ids[i] = mt.TileID
		}
		how = p.lose(key, ids)
	}
	var res []recorderResult
	for _, mt := range man.Tiles {
		var r recorderResult
		switch {
		case p.reject(mt.TileID):
			r = recorderResult{TileID: mt.TileID, Status: "rejected", Reason: "decode_error", Message: "not a PNG"}
		case p.busy[mt.TileID] > 0:
			p.busy[mt.TileID]--
			r = recorderResult{TileID: mt.TileID, Status: "rejected", Reason: "storage_busy", Message: "try again"}
		case sums[mt.TileID] != mt.SHA256:
			r = recorderResult{TileID: mt.TileID, Status: "rejected", Reason: "checksum_mismatch"}
		default:
			p.stores[mt.TileID]++
			p.held[mt.TileID] = heldTile{sha256: mt.SHA256, size: sizes[mt.TileID]}
			r = recorderResult{TileID: mt.TileID, Status: "accepted"}
		}
		switch how {
		case "omit:" + mt.TileID:
		case "twice:" + mt.TileID:
			res = append(res, r, r)
		case "status:" + mt.TileID:
			r.Status = "stored"
			res = append(res, r)
		default:
			res = append(res, r)
		}
	}
	opID := key
	if how == "otherop" {
		opID = "another-operation-" + key
	}
	ans, _ = json.Marshal(map[string]any{"op_id": opID, "results": res})
	p.answers[key] = ans
	if how == "cut" {
		p.cut[key] = true
		writeAnswer(w, ans, true)
		return
	}
	if how == "drop" {
		p.expired[key] = true
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	writeAnswer(w, ans, false)
}

// writeAnswer writes a 200 with ans; cut sends its first bytes only and
// closes the connection, the Content-Length promising the rest.
func writeAnswer(w http.ResponseWriter, ans []byte, cut bool) {
	if !cut {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(ans)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(ans), ans[:len(ans)/2])
	_ = buf.Flush()
}
