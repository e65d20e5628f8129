package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
)

// testAdmission is a Controller with a settable clock, for the rate
// limit's arithmetic; bounds left 0 are the engine's defaults.
func testAdmission(c Config) (*Controller, *time.Time) {
	now := time.Unix(1_800_000_000, 0)
	c.Clock = func() time.Time { return now }
	if c.MaxRecords == 0 {
		c.MaxRecords = 1 << 16
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 256 << 20
	}
	return New(c), &now
}

// recordOverhead is what the engine counts for a record besides its key,
// value and idempotency key (engine.RecordOverhead).
const recordOverhead = 128

// oneRecord is the cost of one record appended to anchor.
func oneRecord(anchor string, n int) *Cost {
	return &Cost{Records: n, Bytes: int64(n) * recordOverhead, Anchors: map[string]int{anchor: n}}
}

// Waiting a CAP_003's RetryAfter is enough for the same request. The wait
// is rounded up, not truncated to whole nanoseconds: at 3 records/s a
// truncated hint (333,333,333 ns) leaves the bucket at 0.999999999 tokens.
// A request larger than a fractional burst (rate 2.5, burst 2.5) waits for
// a full bucket of 2.5, not for 2 tokens.
func TestRateLimitRetryAfterIsEnough(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rate    float64
		burst   int
		records int
	}{
		{"truncated nanoseconds", 3, 1, 1},
		{"over a fractional burst", 2.5, 0, 3},
		{"over a whole burst", 3, 2, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, now := testAdmission(Config{Rate: tc.rate, Burst: tc.burst})
			first := oneRecord("dev", 1)
			if err := a.Acquire(context.Background(), first, true); err != nil {
				t.Fatal(err)
			}
			a.Release(first)
			c := oneRecord("dev", tc.records)
			err := a.Acquire(context.Background(), c, true)
			var re *errs.RefusalError
			if !errors.As(err, &re) || re.Code != errs.CodeRateLimited {
				t.Fatalf("request right after the first: %v, want CAP_003", err)
			}
			*now = now.Add(re.RetryAfter)
			if err := a.Acquire(context.Background(), c, true); err != nil {
				t.Fatalf("the same request after its RetryAfter %v (%.9f tokens): %v", re.RetryAfter, a.Tokens("dev"), err)
			}
			a.Release(c)
		})
	}
}

// A batch refused for the rate limit of several anchors waits for the
// slowest: the refusal names that anchor and its wait, whatever the map
// order, so a retry after the RetryAfter is not refused again.
func TestRateLimitRetryAfterCoversEveryAnchor(t *testing.T) {
	for range 20 { // map order varies from run to run
		a, now := testAdmission(Config{Rate: 1, Burst: 2})
		for _, c := range []*Cost{oneRecord("fast", 1), oneRecord("slow", 2)} {
			if err := a.Acquire(context.Background(), c, true); err != nil {
				t.Fatal(err)
			}
			a.Release(c)
		}
		// fast has 1 token and needs 2 (1 s); slow has 0 and needs 2 (2 s).
		batch := &Cost{Records: 4, Bytes: 4 * recordOverhead, Anchors: map[string]int{"fast": 2, "slow": 2}}
		err := a.Acquire(context.Background(), batch, true)
		var re *errs.RefusalError
		if !errors.As(err, &re) || re.Code != errs.CodeRateLimited {
			t.Fatalf("batch short of tokens on both anchors: %v, want CAP_003", err)
		}
		if re.Anchor != "slow" || re.RetryAfter < 2*time.Second {
			t.Fatalf("refusal names %q with RetryAfter %v, want slow and at least 2s", re.Anchor, re.RetryAfter)
		}
		*now = now.Add(re.RetryAfter)
		if err := a.Acquire(context.Background(), batch, true); err != nil {
			t.Fatalf("the batch after its RetryAfter %v: %v", re.RetryAfter, err)
		}
		a.Release(batch)
	}
}

// A wait too long for a Duration is the longest Duration, not a negative
// one: at 1e-10 records/s one token takes 1e19 ns, past math.MaxInt64,
// where a plain float-to-int conversion gives about -292 years.
func TestRateLimitRetryAfterDoesNotOverflow(t *testing.T) {
	a, _ := testAdmission(Config{Rate: 1e-10, Burst: 1})
	first := oneRecord("dev", 1)
	if err := a.Acquire(context.Background(), first, true); err != nil {
		t.Fatal(err)
	}
	a.Release(first)
	err := a.Acquire(context.Background(), oneRecord("dev", 1), true)
	var re *errs.RefusalError
	if !errors.As(err, &re) || re.Code != errs.CodeRateLimited || re.RetryAfter != time.Duration(math.MaxInt64) {
		t.Fatalf("second record at 1e-10 records/s: %v (RetryAfter %d), want CAP_003 with the longest RetryAfter", err, re.RetryAfter)
	}
}

// A refusal by the per-anchor bound names its anchor and that bound
// (DESIGN.md, "Admission"), not the database's bounds, which may be
// nowhere near reached.
func TestPerAnchorRefusalNamesTheAnchor(t *testing.T) {
	a, _ := testAdmission(Config{MaxRecords: 100, PerAnchor: 2})
	busy := oneRecord("busy", 2)
	if err := a.Acquire(context.Background(), busy, true); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, refuse := range []bool{true, false} {
		err := a.Acquire(ended, &Cost{Records: 2, Bytes: 2 * recordOverhead, Anchors: map[string]int{"busy": 1, "quiet": 1}}, refuse)
		var re *errs.RefusalError
		want := errs.CodeQueueFull
		if !refuse {
			want = errs.CodeCapacityExhausted
		}
		if !errors.As(err, &re) || re.Code != want {
			t.Fatalf("refuse=%v: %v, want %s", refuse, err, want)
		}
		if re.Anchor != "busy" || !strings.Contains(re.Message, `anchor "busy" has 2 records in flight (bound 2 per anchor)`) {
			t.Fatalf("refuse=%v: refusal names anchor %q: %s", refuse, re.Anchor, re.Message)
		}
		if re.InFlightRecords != 2 || re.MaxRecords != 100 {
			t.Fatalf("refuse=%v: capacity state %#v", refuse, re)
		}
	}
	// The database's own bound names no anchor.
	a.Release(busy)
	whole := oneRecord("x", 100)
	if err := a.Acquire(context.Background(), whole, true); err != nil {
		t.Fatal(err)
	}
	var re *errs.RefusalError
	if err := a.Acquire(context.Background(), oneRecord("y", 1), true); !errors.As(err, &re) || re.Code != errs.CodeQueueFull || re.Anchor != "" {
		t.Fatalf("past the database's bound: %v (anchor %q), want CAP_002 naming no anchor", err, re.Anchor)
	}
	a.Release(whole)
}

// A request waiting for room is not starved by later, smaller ones that
// fit: once it waits, they wait behind it. A request over a whole bound is
// admitted alone (DESIGN.md: "so it cannot wait forever"), when nothing is
// in flight; without the queue a steady stream of small appends that fit
// always leaves something in flight, and it waits until its context ends.
func TestAdmissionWaiterIsNotStarved(t *testing.T) {
	a, _ := testAdmission(Config{MaxRecords: 4})
	small := func() *Cost { return oneRecord("s", 1) }
	s1 := small()
	if err := a.Acquire(context.Background(), s1, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang detector
	defer cancel()
	big := oneRecord("b", 10) // over the whole bound: admitted alone
	bigDone := make(chan error, 1)
	go func() { bigDone <- a.Acquire(ctx, big, false) }()
	testutil.WaitFor(t, "the big request to wait", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.waiters == 1 })

	// A small request arriving now fits under the bound, but the big one
	// was first: it waits behind it (and is refused at once with
	// RefuseWhenFull).
	var re *errs.RefusalError
	if err := a.Acquire(ctx, small(), true); !errors.As(err, &re) || re.Code != errs.CodeQueueFull {
		t.Fatalf("small request with RefuseWhenFull while a request waits ahead: %v, want CAP_002", err)
	}
	s2 := small()
	s2Done := make(chan error, 1)
	go func() { s2Done <- a.Acquire(ctx, s2, false) }()
	testutil.WaitFor(t, "the small request to wait or get in", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.waiters == 2 || len(s2Done) > 0
	})
	if len(s2Done) > 0 {
		t.Fatal("a small request got in ahead of the one waiting before it")
	}
	a.Release(s1)
	if err := <-bigDone; err != nil {
		t.Fatalf("the big request once the in-flight small one left: %v", err)
	}
	a.Release(big)
	if err := <-s2Done; err != nil {
		t.Fatalf("the small request behind it: %v", err)
	}
	a.Release(s2)
	if r, b := a.InFlight(); r != 0 || b != 0 || a.waiters != 0 {
		t.Fatalf("left: %d records, %d bytes, %d waiters", r, b, a.waiters)
	}
}

// The order of waiters does not let one busy anchor stall the others: a
// request first in line that has room under the database's bounds but not
// under its anchor's steps out of line.
func TestAdmissionWaiterHeldByItsAnchorLetsOthersBy(t *testing.T) {
	a, _ := testAdmission(Config{MaxRecords: 2, PerAnchor: 1})
	busy, other := oneRecord("busy", 1), oneRecord("other", 1)
	for _, c := range []*Cost{busy, other} {
		if err := a.Acquire(context.Background(), c, true); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang detector
	defer cancel()
	second := oneRecord("busy", 1)
	secondDone := make(chan error, 1)
	go func() { secondDone <- a.Acquire(ctx, second, false) }() // the database is full: it waits in line
	testutil.WaitFor(t, "the second busy request to wait in line", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.queue) == 1 })
	a.Release(other) // room in the database, none for its anchor
	testutil.WaitFor(t, "it to step out of line", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.queue) == 0 && a.waiters == 1 })
	quiet := oneRecord("quiet", 1)
	if err := a.Acquire(ctx, quiet, true); err != nil {
		t.Fatalf("another anchor while a busy anchor's request waits: %v", err)
	}
	a.Release(quiet)
	a.Release(busy)
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	a.Release(second)
}

// The rate limit keeps no bucket it does not need: a full bucket is the
// same as none (a new one starts full). A refused request leaves no bucket
// behind for its anchor, and an anchor whose bucket is full again loses
// it, so the map does not grow with every anchor (or refused id) since
// Open.
func TestRateLimitBucketsDoNotAccumulate(t *testing.T) {
	a, now := testAdmission(Config{MaxRecords: 1, Rate: 1000, Burst: 1})
	held := oneRecord("held", 1)
	if err := a.Acquire(context.Background(), held, true); err != nil {
		t.Fatal(err)
	}
	var re *errs.RefusalError
	if err := a.Acquire(context.Background(), oneRecord("new", 1), true); !errors.As(err, &re) || re.Code != errs.CodeQueueFull {
		t.Fatalf("past the bound: %v, want CAP_002", err)
	}
	if _, ok := a.buckets["new"]; ok {
		t.Fatal("the refused request left a bucket for its anchor")
	}
	a.Release(held)
	for i := range 10_000 {
		c := oneRecord(fmt.Sprint("dev-", i), 1)
		if err := a.Acquire(context.Background(), c, true); err != nil {
			t.Fatal(err)
		}
		a.Release(c)
		*now = now.Add(time.Millisecond) // a token a millisecond: each bucket is full again
	}
	if n := len(a.buckets); n > 2048 {
		t.Fatalf("%d buckets kept for 10,000 anchors whose buckets are full again", n)
	}
	// The accounting is unchanged: an anchor just appended to has none left.
	last := oneRecord("last", 1)
	if err := a.Acquire(context.Background(), last, true); err != nil {
		t.Fatal(err)
	}
	a.Release(last)
	if err := a.Acquire(context.Background(), oneRecord("last", 1), true); !errors.As(err, &re) || re.Code != errs.CodeRateLimited {
		t.Fatalf("second record within the millisecond: %v, want CAP_003", err)
	}
}
