// Package humanize writes counts and sizes the way the command line and
// its tools print them for a person: "1 record", "3 records", "1.5 KiB".
package humanize

import (
	"fmt"
	"math"
)

// Plural is "1 noun" or "n nouns"; with nouns given, "n nouns[0]" (an
// irregular plural: Plural(n, "retry", "retries")).
func Plural[N ~int | ~int64 | ~uint64 | ~uint32](n N, noun string, nouns ...string) string {
	if n == 1 {
		return "1 " + noun
	}
	if len(nouns) > 0 {
		return fmt.Sprintf("%d %s", n, nouns[0])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Bytes renders a byte count in binary units with one decimal: "512 B",
// "1.5 KiB", "64.0 MiB". A negative count (a difference, such as stubs
// larger than the segments they replace) has a minus sign.
func Bytes(n int64) string {
	const unit = 1024
	if n == math.MinInt64 { // -n would be n again
		return "-8.0 EiB"
	}
	if n < 0 {
		return "-" + Bytes(-n)
	}
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
