package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A rate-limit refusal carries the capacity state like the bound refusals
// (DESIGN.md, "Admission": every refusal does); CAP_003 came back with
// zero bounds, which the CLI then left out of its JSON.
func TestRateLimitRefusalCarriesCapacityState(t *testing.T) {
	clk := newFakeClock()
	db := mustOpen(t, vfs.NewMem(), Options{AnchorRate: 1, AnchorBurst: 1, Clock: clk.now})
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Put(ctx, "dev", []byte("k1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	_, err := db.Put(ctx, "dev", []byte("k2"), []byte("v"))
	var re *RefusalError
	if !errors.As(err, &re) || re.Code != errs.CodeRateLimited || re.Reason != "rate_limited" {
		t.Fatalf("append beyond the burst: %v, want CAP_003 rate_limited", err)
	}
	if re.MaxRecords != 1<<16 || re.MaxBytes != 256<<20 || re.InFlightRecords != 0 || re.InFlightBytes != 0 {
		t.Fatalf("CAP_003 without the capacity state: %#v", re)
	}
}

// testAdmission is an admission with a settable clock, for the rate limit's
// arithmetic.
func testAdmission(o Options) (*admission, *time.Time) {
	now := time.Unix(1_800_000_000, 0)
	o.Clock = func() time.Time { return now }
	if o.MaxInFlightRecords == 0 {
		o.MaxInFlightRecords = 1 << 16
	}
	if o.MaxInFlightBytes == 0 {
		o.MaxInFlightBytes = 256 << 20
	}
	a := &admission{}
	a.init(&o)
	return a, &now
}

// oneRecord is the cost of one record appended to anchor.
func oneRecord(anchor string, n int) *cost {
	return &cost{records: n, bytes: int64(n) * RecordOverhead, anchors: map[string]int{anchor: n}}
}

// Waiting a CAP_003's RetryAfter is enough for the same request. It was
// not: the wait was truncated to whole nanoseconds, so at 3 records/s the
// hint (333,333,333 ns) left the bucket at 0.999999999 tokens; and a
// request larger than a fractional burst (rate 2.5, burst 2.5) was told to
// wait until 2 tokens had accrued when it needs a full bucket of 2.5.
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
			a, now := testAdmission(Options{AnchorRate: tc.rate, AnchorBurst: tc.burst})
			first := oneRecord("dev", 1)
			if err := a.acquire(context.Background(), first, true); err != nil {
				t.Fatal(err)
			}
			a.release(first)
			c := oneRecord("dev", tc.records)
			err := a.acquire(context.Background(), c, true)
			var re *RefusalError
			if !errors.As(err, &re) || re.Code != errs.CodeRateLimited {
				t.Fatalf("request right after the first: %v, want CAP_003", err)
			}
			*now = now.Add(re.RetryAfter)
			if err := a.acquire(context.Background(), c, true); err != nil {
				t.Fatalf("the same request after its RetryAfter %v (%.9f tokens): %v", re.RetryAfter, a.tokens("dev"), err)
			}
			a.release(c)
		})
	}
}

// A batch refused for the rate limit of several anchors waits for the
// slowest: the refusal named whichever short anchor map order gave first,
// with its RetryAfter, and a retry after it could be refused again.
func TestRateLimitRetryAfterCoversEveryAnchor(t *testing.T) {
	for range 20 { // map order varies from run to run
		a, now := testAdmission(Options{AnchorRate: 1, AnchorBurst: 2})
		for _, c := range []*cost{oneRecord("fast", 1), oneRecord("slow", 2)} {
			if err := a.acquire(context.Background(), c, true); err != nil {
				t.Fatal(err)
			}
			a.release(c)
		}
		// fast has 1 token and needs 2 (1 s); slow has 0 and needs 2 (2 s).
		batch := &cost{records: 4, bytes: 4 * RecordOverhead, anchors: map[string]int{"fast": 2, "slow": 2}}
		err := a.acquire(context.Background(), batch, true)
		var re *RefusalError
		if !errors.As(err, &re) || re.Code != errs.CodeRateLimited {
			t.Fatalf("batch short of tokens on both anchors: %v, want CAP_003", err)
		}
		if re.Anchor != "slow" || re.RetryAfter < 2*time.Second {
			t.Fatalf("refusal names %q with RetryAfter %v, want slow and at least 2s", re.Anchor, re.RetryAfter)
		}
		*now = now.Add(re.RetryAfter)
		if err := a.acquire(context.Background(), batch, true); err != nil {
			t.Fatalf("the batch after its RetryAfter %v: %v", re.RetryAfter, err)
		}
		a.release(batch)
	}
}

// A clock that steps back (Options.Clock need not be monotonic: a wall
// clock corrected by NTP) counts as no time passing, and the bucket refills
// from the new time. It did not refill at all until the clock came back
// to where it had been: one step back of an hour refused the anchor for
// an hour, each time with a RetryAfter of 100 ms.
func TestRateLimitClockSteppingBack(t *testing.T) {
	clk := newFakeClock()
	db := mustOpen(t, vfs.NewMem(), Options{AnchorRate: 10, AnchorBurst: 1, Clock: clk.now})
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Put(ctx, "dev", []byte("k1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	clk.advance(-time.Hour)
	_, err := db.Put(ctx, "dev", []byte("k2"), []byte("v"))
	var re *RefusalError
	if !errors.As(err, &re) || re.Code != errs.CodeRateLimited || re.RetryAfter > 101*time.Millisecond {
		t.Fatalf("append right after the clock stepped back: %v, want CAP_003 with a RetryAfter of about 100ms", err)
	}
	clk.advance(re.RetryAfter)
	if _, err := db.Put(ctx, "dev", []byte("k2"), []byte("v")); err != nil {
		t.Fatalf("append after the RetryAfter %v: %v", re.RetryAfter, err)
	}
	if got := db.adm.tokens("dev"); got < -1e-9 || got > 1 {
		t.Fatalf("%.9f tokens after the append, want about 0", got)
	}
}

// A wait too long for a Duration is the longest Duration, not a negative
// one: at 1e-10 records/s one token takes 1e19 ns, past math.MaxInt64, and
// the float-to-int conversion gave a RetryAfter of about -292 years.
func TestRateLimitRetryAfterDoesNotOverflow(t *testing.T) {
	a, _ := testAdmission(Options{AnchorRate: 1e-10, AnchorBurst: 1})
	first := oneRecord("dev", 1)
	if err := a.acquire(context.Background(), first, true); err != nil {
		t.Fatal(err)
	}
	a.release(first)
	err := a.acquire(context.Background(), oneRecord("dev", 1), true)
	var re *RefusalError
	if !errors.As(err, &re) || re.Code != errs.CodeRateLimited || re.RetryAfter != time.Duration(math.MaxInt64) {
		t.Fatalf("second record at 1e-10 records/s: %v (RetryAfter %d), want CAP_003 with the longest RetryAfter", err, re.RetryAfter)
	}
}

// A refusal by the per-anchor bound names its anchor and that bound
// (DESIGN.md, "Admission"); it named none and quoted the database's
// bounds, which were nowhere near reached.
func TestPerAnchorRefusalNamesTheAnchor(t *testing.T) {
	a, _ := testAdmission(Options{MaxInFlightRecords: 100, MaxInFlightPerAnchor: 2})
	busy := oneRecord("busy", 2)
	if err := a.acquire(context.Background(), busy, true); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, refuse := range []bool{true, false} {
		err := a.acquire(ended, &cost{records: 2, bytes: 2 * RecordOverhead, anchors: map[string]int{"busy": 1, "quiet": 1}}, refuse)
		var re *RefusalError
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
	a.release(busy)
	whole := oneRecord("x", 100)
	if err := a.acquire(context.Background(), whole, true); err != nil {
		t.Fatal(err)
	}
	var re *RefusalError
	if err := a.acquire(context.Background(), oneRecord("y", 1), true); !errors.As(err, &re) || re.Code != errs.CodeQueueFull || re.Anchor != "" {
		t.Fatalf("past the database's bound: %v (anchor %q), want CAP_002 naming no anchor", err, re.Anchor)
	}
	a.release(whole)
}

// Limits that let one record exceed what one append may carry
// (MaxBatchBytes) are refused at Open, naming both: Validate allows values
// up to the format's 512 MiB, and Open took a 300 MiB value limit that
// every append at it then failed against another limit.
func TestLimitsAboveOneAppendAreRefusedAtOpen(t *testing.T) {
	over := segment.Limits{MaxKey: 1 << 10, MaxValue: 300 << 20, MaxIdempotencyKey: 256}
	_, err := Open("db", Options{FS: vfs.NewMem(), Limits: over})
	if CodeOf(err) != errs.CodeInvalidInput || !strings.Contains(err.Error(), "314572800") || !strings.Contains(err.Error(), fmt.Sprint(MaxBatchBytes)) {
		t.Fatalf("open with a 300 MiB value limit: %v, want INPUT_001 naming the value limit and %d", err, MaxBatchBytes)
	}
	// Exactly at the bound is fine.
	at := segment.Limits{MaxKey: 1 << 10, MaxIdempotencyKey: 256}
	at.MaxValue = MaxBatchBytes - at.MaxKey - at.MaxIdempotencyKey - RecordOverhead
	db, err := Open("db", Options{FS: vfs.NewMem(), Limits: at})
	if err != nil {
		t.Fatalf("open with limits exactly at one append: %v", err)
	}
	db.Close()
}

// A request waiting for room is not starved by later, smaller ones that
// fit: once it waits, they wait behind it. DESIGN.md says a request over a
// whole bound is admitted alone "so it cannot wait forever", but it needs
// nothing in flight, and under a steady stream of small appends that fit
// there always was something: it waited until its context ended.
func TestAdmissionWaiterIsNotStarved(t *testing.T) {
	a, _ := testAdmission(Options{MaxInFlightRecords: 4})
	small := func() *cost { return oneRecord("s", 1) }
	s1 := small()
	if err := a.acquire(context.Background(), s1, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang detector
	defer cancel()
	big := oneRecord("b", 10) // over the whole bound: admitted alone
	bigDone := make(chan error, 1)
	go func() { bigDone <- a.acquire(ctx, big, false) }()
	waitFor(t, "the big request to wait", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.waiters == 1 })

	// A small request arriving now fits under the bound, but the big one
	// was first: it waits behind it (and is refused at once with
	// RefuseWhenFull).
	var re *RefusalError
	if err := a.acquire(ctx, small(), true); !errors.As(err, &re) || re.Code != errs.CodeQueueFull {
		t.Fatalf("small request with RefuseWhenFull while a request waits ahead: %v, want CAP_002", err)
	}
	s2 := small()
	s2Done := make(chan error, 1)
	go func() { s2Done <- a.acquire(ctx, s2, false) }()
	waitFor(t, "the small request to wait or get in", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.waiters == 2 || len(s2Done) > 0
	})
	if len(s2Done) > 0 {
		t.Fatal("a small request got in ahead of the one waiting before it")
	}
	a.release(s1)
	if err := <-bigDone; err != nil {
		t.Fatalf("the big request once the in-flight small one left: %v", err)
	}
	a.release(big)
	if err := <-s2Done; err != nil {
		t.Fatalf("the small request behind it: %v", err)
	}
	a.release(s2)
	if r, b := a.inFlight(); r != 0 || b != 0 || a.waiters != 0 {
		t.Fatalf("left: %d records, %d bytes, %d waiters", r, b, a.waiters)
	}
}

// The order of waiters does not let one busy anchor stall the others: a
// request first in line that has room under the database's bounds but not
// under its anchor's steps out of line.
func TestAdmissionWaiterHeldByItsAnchorLetsOthersBy(t *testing.T) {
	a, _ := testAdmission(Options{MaxInFlightRecords: 2, MaxInFlightPerAnchor: 1})
	busy, other := oneRecord("busy", 1), oneRecord("other", 1)
	for _, c := range []*cost{busy, other} {
		if err := a.acquire(context.Background(), c, true); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang detector
	defer cancel()
	second := oneRecord("busy", 1)
	secondDone := make(chan error, 1)
	go func() { secondDone <- a.acquire(ctx, second, false) }() // the database is full: it waits in line
	waitFor(t, "the second busy request to wait in line", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.queue) == 1 })
	a.release(other) // room in the database, none for its anchor
	waitFor(t, "it to step out of line", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.queue) == 0 && a.waiters == 1 })
	quiet := oneRecord("quiet", 1)
	if err := a.acquire(ctx, quiet, true); err != nil {
		t.Fatalf("another anchor while a busy anchor's request waits: %v", err)
	}
	a.release(quiet)
	a.release(busy)
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	a.release(second)
}

// The rate limit keeps no bucket it does not need: a full bucket is the
// same as none (a new one starts full). A refused request left a bucket
// behind for its anchor, and every anchor that ever appended kept one for
// the life of the database, 100,000 anchors or a stream of refused ids.
func TestRateLimitBucketsDoNotAccumulate(t *testing.T) {
	a, now := testAdmission(Options{MaxInFlightRecords: 1, AnchorRate: 1000, AnchorBurst: 1})
	held := oneRecord("held", 1)
	if err := a.acquire(context.Background(), held, true); err != nil {
		t.Fatal(err)
	}
	var re *RefusalError
	if err := a.acquire(context.Background(), oneRecord("new", 1), true); !errors.As(err, &re) || re.Code != errs.CodeQueueFull {
		t.Fatalf("past the bound: %v, want CAP_002", err)
	}
	if _, ok := a.buckets["new"]; ok {
		t.Fatal("the refused request left a bucket for its anchor")
	}
	a.release(held)
	for i := range 10_000 {
		c := oneRecord(fmt.Sprint("dev-", i), 1)
		if err := a.acquire(context.Background(), c, true); err != nil {
			t.Fatal(err)
		}
		a.release(c)
		*now = now.Add(time.Millisecond) // a token a millisecond: each bucket is full again
	}
	if n := len(a.buckets); n > 2048 {
		t.Fatalf("%d buckets kept for 10,000 anchors whose buckets are full again", n)
	}
	// The accounting is unchanged: an anchor just appended to has none left.
	last := oneRecord("last", 1)
	if err := a.acquire(context.Background(), last, true); err != nil {
		t.Fatal(err)
	}
	a.release(last)
	if err := a.acquire(context.Background(), oneRecord("last", 1), true); !errors.As(err, &re) || re.Code != errs.CodeRateLimited {
		t.Fatalf("second record within the millisecond: %v, want CAP_003", err)
	}
}
