package upload

import (
	"math/bits"

	"github.com/tilectl/tilectl/fdr"
)

// FDRSummary is what a run wrote to the flight data recorder (`fdr` in
// -o json; null when no retry decorator ran: dry run, --no-retry).
//
//	path                      the ring file
//	capacity_bytes            its record area, fixed when the file was made
//	records, bytes            give-up records this run wrote, and their size
//	ring_too_small            the run wrote more than the ring holds: its
//	                          oldest records were overwritten by its newest
//	                          (each was in the ring when its give-up
//	                          committed)
//	suggested_capacity_bytes  when too small: a capacity that holds this run
//	                          twice over (at most 1 GiB); otherwise null
type FDRSummary struct {
	Path                   string `json:"path"`
	CapacityBytes          int64  `json:"capacity_bytes"`
	Records                int    `json:"records"`
	Bytes                  int64  `json:"bytes"`
	RingTooSmall           bool   `json:"ring_too_small"`
	SuggestedCapacityBytes *int64 `json:"suggested_capacity_bytes"`
}

// fdrSummary says whether the run's give-up records fit in the ring.
func fdrSummary(path string, capacity int64, records int, bytes int64) *FDRSummary {
	s := &FDRSummary{Path: path, CapacityBytes: capacity, Records: records, Bytes: bytes}
	if bytes > capacity {
		s.RingTooSmall = true
		want := int64(fdr.MaxCapacity)
		if 2*bytes < fdr.MaxCapacity {
			want = max(fdr.DefaultCapacity, int64(1)<<bits.Len64(uint64(2*bytes-1)))
		}
		s.SuggestedCapacityBytes = &want
	}
	return s
}
