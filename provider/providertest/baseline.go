package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// BaselineUpload is the least a client can do: the same batches, the same
// multipart bytes read from the same files, the same concurrency, and
// nothing else: no journal, no verification, no retries, no settlement.
// The uploader's and upload-pending's benchmarks compare tilectl against
// it. It returns the batches that got no 200, for a caller that resends
// them.
func BaselineUpload(ctx context.Context, client *http.Client, baseURL, token, flightID string,
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
	req, err := baselineBatchRequest(ctx, baseURL, token, flightID, operation.NewID(), blobs, tiles)
	if err != nil {
		return err
	}
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

// baselineBatchRequest is the batch request of tiles under key: the
// manifest and the bytes on disk, read into memory, as a naive client
// sends them.
func baselineBatchRequest(ctx context.Context, baseURL, token, flightID, key string,
	blobs *tilestore.BlobStore, tiles []tilestore.Tile) (*http.Request, error) {
	bt := make([]BatchTile, len(tiles))
	for i, t := range tiles {
		f, err := blobs.Open(t.BlobPath)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		bt[i] = BatchTile{ID: t.ID, Z: t.Z, X: t.X, Y: t.Y, ContentType: t.ContentType, Size: t.SizeBytes,
			SHA256: t.SHA256, CapturedAt: t.CapturedAt.UTC().Format(time.RFC3339), Body: f}
	}
	var buf bytes.Buffer
	contentType, err := WriteBatch(&buf, bt)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/flights/"+url.PathEscape(flightID)+"/tiles:batch", &buf)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(operation.HeaderIdempotencyKey, key)
	return req, nil
}

// BaselineCapabilities is what a naive client does before its first
// batch: it asks the provider's capabilities, as the contract requires of
// a client that sizes its batches, and returns max_batch_tiles.
func BaselineCapabilities(ctx context.Context, client *http.Client, baseURL, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1/capabilities", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("baseline capabilities: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("baseline capabilities: %d", resp.StatusCode)
	}
	var caps struct {
		MaxBatchTiles int `json:"max_batch_tiles"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&caps); err != nil {
		return 0, fmt.Errorf("baseline capabilities: %w", err)
	}
	if caps.MaxBatchTiles < 1 {
		return 0, fmt.Errorf("baseline capabilities: max_batch_tiles %d", caps.MaxBatchTiles)
	}
	return caps.MaxBatchTiles, nil
}
