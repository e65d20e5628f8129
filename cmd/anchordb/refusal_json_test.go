package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
)

// A refusal's retry hint prints in whole milliseconds rounded up: a hint
// under a millisecond (a rate limit of thousands of records a second)
// printed as 0 and, being omitempty, not at all, as if there were none;
// and 1.9 ms printed as 1, too soon to be enough.
func TestRefusalJSONRetryHintRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		want  any // float64 from JSON, or nil when absent
	}{
		{0, nil},
		{300 * time.Microsecond, float64(1)},
		{time.Millisecond, float64(1)},
		{1900 * time.Microsecond, float64(2)},
		{time.Duration(1<<63 - 1), float64(9223372036855)},
	} {
		re := errs.NewRefusal(errs.CodeRateLimited, tc.after, "anchor %q is limited", "dev")
		re.Anchor = "dev"
		b, err := json.Marshal(errorJSON(re))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if got := m["error"]["retry_after_ms"]; got != tc.want {
			t.Fatalf("RetryAfter %v: retry_after_ms %v, want %v (%s)", tc.after, got, tc.want, b)
		}
		if m["error"]["code"] != "CAP_003" || m["error"]["reason"] != "rate_limited" || m["error"]["anchor"] != "dev" {
			t.Fatalf("refusal JSON %s", b)
		}
	}
}
