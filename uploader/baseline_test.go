package uploader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"sync"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// baselineUpload is the least a client can do: the same batches, the same
// multipart bytes read from the same files, the same concurrency, and
// nothing else: no journal, no verification, no retries, no settlement.
// BenchmarkEndToEnd compares the uploader against it. It returns the
// batches that got no 200, for a caller that resends them.
func baselineUpload(ctx context.Context, client *http.Client, baseURL, token, flightID string,
	blobs *tilestore.BlobStore, batches [][]tilestore.Tile, concurrency int) (failed [][]tilestore.Tile, firstErr error) {
	ch := make(chan []tilestore.Tile)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range ch {
				if err := baselinePost(ctx, client, baseURL, token, flightID, blobs, b); err != nil {
					mu.Lock()
					failed = append(failed, b)
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, b := range batches {
		ch <- b
	}
	close(ch)
	wg.Wait()
	return failed, firstErr
}

func baselinePost(ctx context.Context, client *http.Client, baseURL, token, flightID string,
	blobs *tilestore.BlobStore, tiles []tilestore.Tile) error {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	type entry struct {
		TileID      string `json:"tile_id"`
		Z           int    `json:"z"`
		X           int64  `json:"x"`
		Y           int64  `json:"y"`
		ContentType string `json:"content_type"`
		Size        int64  `json:"size"`
		SHA256      string `json:"sha256"`
		CapturedAt  string `json:"captured_at"`
	}
	m := struct {
		Tiles []entry `json:"tiles"`
	}{}
	for _, t := range tiles {
		m.Tiles = append(m.Tiles, entry{t.ID, t.Z, t.X, t.Y, t.ContentType, t.SizeBytes, t.SHA256, t.CapturedAt.UTC().Format(time.RFC3339)})
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="manifest"`)
	h.Set("Content-Type", "application/json")
	p, _ := mw.CreatePart(h)
	if err := json.NewEncoder(p).Encode(m); err != nil {
		return err
	}
	for _, t := range tiles {
		p, _ := mw.CreateFormFile(t.ID, t.ID)
		f, err := blobs.Open(t.BlobPath)
		if err != nil {
			return err
		}
		_, err = io.Copy(p, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	mw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/flights/"+flightID+"/tiles:batch", &buf)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", operation.NewID())
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("baseline batch: %d", resp.StatusCode)
	}
	return nil
}
