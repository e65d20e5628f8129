package humanize

import (
	"math"
	"testing"
)

func TestPlural(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Plural(0, "record"), "0 records"},
		{Plural(1, "record"), "1 record"},
		{Plural(uint64(2), "record"), "2 records"},
		{Plural(int64(1), "retry", "retries"), "1 retry"},
		{Plural(uint32(7), "retry", "retries"), "7 retries"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:             "0 B",
		1023:          "1023 B",
		1024:          "1.0 KiB",
		1536:          "1.5 KiB",
		64 << 20:      "64.0 MiB",
		-2048:         "-2.0 KiB",
		math.MaxInt64: "8.0 EiB",
		math.MinInt64: "-8.0 EiB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
