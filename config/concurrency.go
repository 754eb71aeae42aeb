package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Concurrency is upload.concurrency: ConcurrencyAuto, or a fixed number of
// batches in flight.
type Concurrency int

// ConcurrencyAuto lets the uploader decide how many batches are in flight
// from what it measures (uploader/concurrency): it grows while the
// batches' round trip stays near the least seen, shrinks when they queue,
// and cuts on 429, 503, timeouts and the breaker opening. It is a value no
// one writes as a number, so that 0 and negative numbers stay what they
// are, out of range, and a flag can still override them (Validate decides,
// after every source is applied).
const ConcurrencyAuto Concurrency = math.MinInt32

// Batches is the number the uploader takes: 0 for auto, else the number.
func (c Concurrency) Batches() int {
	if c == ConcurrencyAuto {
		return 0
	}
	return int(c)
}

// String is "auto" or the number.
func (c Concurrency) String() string {
	if c == ConcurrencyAuto {
		return "auto"
	}
	return strconv.Itoa(int(c))
}

// parseConcurrency reads "auto" (any case) or a whole number; the range is
// Validate's.
func parseConcurrency(s string) (Concurrency, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "auto") {
		return ConcurrencyAuto, nil
	}
	n, err := strconv.Atoi(t)
	if err != nil || n <= math.MinInt32 || n > math.MaxInt32 {
		return 0, fmt.Errorf("want auto or a number of batches from 1 to %d, got %q", MaxConcurrency, s)
	}
	return Concurrency(n), nil
}
