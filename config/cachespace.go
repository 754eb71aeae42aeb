package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultMinFreeBytes and DefaultMinFreePercent make the default reserve
// of cache.min_free: the larger of the two.
const (
	DefaultMinFreeBytes   = 1 << 30
	DefaultMinFreePercent = 5
)

// ParseAge reads an age such as 7d, 36h or 90m: a Go duration, or a whole
// or decimal number of days with the suffix d. It must be positive.
func ParseAge(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(t, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 || n > 100*365 {
			return 0, fmt.Errorf("want an age such as 7d, 36h or 90m, got %q", s)
		}
		return time.Duration(n * 24 * float64(time.Hour)), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("want an age such as 7d, 36h or 90m, got %q", s)
	}
	return d, nil
}

// RetentionAge is cache.retention as a duration; 0 when it is unset (off).
// Validate has checked it.
func (c *Config) RetentionAge() time.Duration {
	if strings.TrimSpace(c.Cache.Retention) == "" {
		return 0
	}
	d, _ := ParseAge(c.Cache.Retention)
	return d
}

// MinFree is cache.min_free read: Bytes, or Percent of the filesystem.
type MinFree struct {
	Bytes   int64
	Percent float64
	Default bool // unset: the larger of DefaultMinFreeBytes and DefaultMinFreePercent
}

// ParseMinFree reads a reserve such as 2G, 500M, 1073741824 or 10%; "" is
// the default.
func ParseMinFree(s string) (MinFree, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return MinFree{Default: true}, nil
	}
	bad := fmt.Errorf("want bytes such as 2G, 500M or 1073741824, or a percent of the filesystem such as 10%%, got %q", s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		n, err := strconv.ParseFloat(p, 64)
		if err != nil || n < 0 || n >= 100 {
			return MinFree{}, bad
		}
		return MinFree{Percent: n}, nil
	}
	mult := int64(1)
	switch strings.ToUpper(t[len(t)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	}
	if mult > 1 {
		t = t[:len(t)-1]
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*float64(mult) > 1<<62 {
		return MinFree{}, bad
	}
	return MinFree{Bytes: int64(n * float64(mult))}, nil
}

// Reserve is the free space to keep on a filesystem of total bytes.
func (m MinFree) Reserve(total int64) int64 {
	switch {
	case m.Default:
		return max(DefaultMinFreeBytes, total*DefaultMinFreePercent/100)
	case m.Percent > 0:
		return int64(float64(total) * m.Percent / 100)
	}
	return m.Bytes
}

// String says what the reserve is, for an error.
func (m MinFree) String() string {
	switch {
	case m.Default:
		return fmt.Sprintf("the larger of 1 GiB and %d%% of the filesystem", DefaultMinFreePercent)
	case m.Percent > 0:
		return strconv.FormatFloat(m.Percent, 'f', -1, 64) + "% of the filesystem"
	}
	return strconv.FormatInt(m.Bytes, 10) + " bytes"
}

// CacheMinFree is cache.min_free read; Validate has checked it.
func (c *Config) CacheMinFree() MinFree {
	m, _ := ParseMinFree(c.Cache.MinFree)
	return m
}
