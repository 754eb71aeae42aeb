package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Concurrency is upload.concurrency: ConcurrencyAuto, or a fixed number of
// batches in flight.
type Concurrency int

// ConcurrencyAuto lets the uploader decide how many batches are in flight
// from what it measures (uploader/concurrency): it grows while the
// batches' round trip stays near the least seen, shrinks when they queue,
// and cuts on 429, 503, timeouts and the breaker opening.
const ConcurrencyAuto Concurrency = 0

// String is "auto" or the number.
func (c Concurrency) String() string {
	if c == ConcurrencyAuto {
		return "auto"
	}
	return strconv.Itoa(int(c))
}

// parseConcurrency reads "auto" (any case) or a number from 1; the range
// above 1 is Validate's.
func parseConcurrency(s string) (Concurrency, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "auto") {
		return ConcurrencyAuto, nil
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("want auto or a number of batches from 1, got %q", s)
	}
	return Concurrency(n), nil
}
