package iostreams

import (
	"fmt"
	"time"
)

// HumanBytes is n in binary units for people ("1.5 MiB"); JSON keeps raw
// numbers.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// HumanDuration rounds d for people: "850ms", "4s", "1m3s".
func HumanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// Count is n with the noun phrase that agrees with it: Count(1, "tile
// is", "tiles are") is "1 tile is", Count(3, ...) "3 tiles are". Text for
// people never says "1 tiles" or "tile(s)".
func Count[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
