package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"pgregory.net/rapid"
)

// slowSyncFS makes every fsync of the journal take d, so appends pile up
// behind a commit and the in-flight bounds are reached deterministically
// enough.
func slowSyncFS(fs vfs.FS, d time.Duration) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.Contains(op.Path, "journal") {
				time.Sleep(d)
			}
		}
		return nil
	}))
}

// waitInFlight waits until some append is admitted and not yet done.
func waitInFlight(t *testing.T, db *DB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := db.adm.InFlight(); n == 0; n, _ = db.adm.InFlight() {
		if time.Now().After(deadline) {
			t.Fatal("no append was ever in flight")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// fakeClock is a settable clock for the rate limit (and record times).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Nanosecond) // record times stay distinct
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAdmissionLoad: 1,000 concurrent appenders against a small in-flight
// bound with RefuseWhenFull. Some are refused with CAP_002; none panics or
// hangs; every accepted append is durable and in its chain after a reopen;
// refused ones left nothing behind.
func TestAdmissionLoad(t *testing.T) {
	writers := 1000
	if testing.Short() {
		writers = 300
	}
	mem := vfs.NewMem()
	db := mustOpen(t, slowSyncFS(mem, 2*time.Millisecond), Options{MaxInFlightRecords: 16, RefuseWhenFull: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type outcome struct {
		e   Entry
		r   Receipt
		err error
	}
	out := make([]outcome, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			e := Entry{Anchor: fmt.Sprintf("a%02d", i%37), Type: "put", Key: []byte(fmt.Sprint("k", i)),
				Value: []byte(fmt.Sprint("v", i)), IdempotencyKey: []byte(fmt.Sprint("op-", i))}
			r, err := db.Append(ctx, e)
			out[i] = outcome{e, r, err}
		}()
	}
	close(start)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("appenders hung")
	}
	var accepted, refused int
	for _, o := range out {
		switch {
		case o.err == nil:
			accepted++
		case errors.Is(o.err, ErrQueueFull):
			refused++
			var re *RefusalError
			if !errors.As(o.err, &re) || re.Code != errs.CodeQueueFull || re.RetryAfter <= 0 || re.MaxRecords != 16 || re.InFlightRecords < 1 {
				t.Fatalf("refusal without its capacity state: %#v", re)
			}
		default:
			t.Fatalf("append of %s: %v", o.e.IdempotencyKey, o.err)
		}
	}
	t.Logf("%d accepted, %d refused with CAP_002", accepted, refused)
	if refused == 0 || accepted == 0 {
		t.Fatalf("%d accepted, %d refused: the bound never bit (or nothing got through)", accepted, refused)
	}
	if got := db.Metrics().Refusals.QueueFull; got != uint64(refused) {
		t.Fatalf("stats count %d CAP_002 refusals, the callers saw %d", got, refused)
	}
	if n, b := db.adm.InFlight(); n != 0 || b != 0 {
		t.Fatalf("%d records, %d bytes still in flight after every append returned", n, b)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, mem, Options{})
	defer db.Close()
	var records uint64
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		records += info.Records
	}
	if records != uint64(accepted) {
		t.Fatalf("%d records on disk, %d appends accepted", records, accepted)
	}
	for _, o := range out {
		if o.err == nil {
			rec, err := db.Record(ctx, o.e.Anchor, o.r.Seq)
			if err != nil || rec.Hash != o.r.Hash || string(rec.IdempotencyKey) != string(o.e.IdempotencyKey) {
				t.Fatalf("accepted %s: %+v %v", o.e.IdempotencyKey, rec, err)
			}
			continue
		}
		// A refused key is unknown: appending it now appends.
		if _, found, err := db.lookupIdem(o.e.Anchor, o.e.IdempotencyKey); err != nil || found {
			t.Fatalf("refused %s left its key behind (%v)", o.e.IdempotencyKey, err)
		}
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Failures)
	}
}

// TestAdmissionWaitsUntilContextEnds: without RefuseWhenFull an append past
// the bound waits, and gives up with CAP_001 when its context ends.
func TestAdmissionWaitsUntilContextEnds(t *testing.T) {
	mem := vfs.NewMem()
	db := mustOpen(t, slowSyncFS(mem, 200*time.Millisecond), Options{MaxInFlightRecords: 1})
	defer db.Close()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := db.Put(ctx, "a", []byte("k1"), []byte("v"))
		first <- err
	}()
	waitInFlight(t, db)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := db.Put(short, "b", []byte("k2"), []byte("v"))
	var re *RefusalError
	if !errors.Is(err, ErrCapacityExhausted) || !errors.As(err, &re) || re.InFlightRecords != 1 || re.MaxRecords != 1 {
		t.Fatalf("append past the bound: %v, want CAP_001 with the capacity state", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Room again: the next append goes through.
	if _, err := db.Put(ctx, "b", []byte("k2"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := db.Metrics().Refusals.CapacityExhausted; got != 1 {
		t.Fatalf("%d CAP_001 refusals counted, want 1", got)
	}
}

// TestAdmissionPerAnchorBound: one anchor at its bound is refused while
// another anchor still gets in.
func TestAdmissionPerAnchorBound(t *testing.T) {
	mem := vfs.NewMem()
	db := mustOpen(t, slowSyncFS(mem, 200*time.Millisecond), Options{MaxInFlightPerAnchor: 1, RefuseWhenFull: true})
	defer db.Close()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := db.Put(ctx, "busy", []byte("k1"), []byte("v"))
		first <- err
	}()
	waitInFlight(t, db)
	if _, err := db.Put(ctx, "busy", []byte("k2"), []byte("v")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second append to the busy anchor: %v, want CAP_002", err)
	}
	if _, err := db.Put(ctx, "quiet", []byte("k3"), []byte("v")); err != nil {
		t.Fatalf("append to another anchor: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "busy", []byte("k2"), []byte("v")); err != nil {
		t.Fatalf("the busy anchor after its append finished: %v", err)
	}
}

// TestRateLimitSaturatedRetryIsFree: with an anchor's budget exhausted, a
// new append is refused with CAP_003 and a RetryAfter, while a retry of an
// already committed key returns duplicate: true and moves no counter.
func TestRateLimitSaturatedRetryIsFree(t *testing.T) {
	clk := newFakeClock()
	mem := vfs.NewMem()
	db := mustOpen(t, mem, Options{AnchorRate: 10, AnchorBurst: 3, Clock: clk.now})
	defer db.Close()
	ctx := context.Background()
	put := func(key, idem string) (Receipt, error) {
		return db.Append(ctx, Entry{Anchor: "dev", Type: "put", Key: []byte(key), Value: []byte("v"), IdempotencyKey: []byte(idem)})
	}
	var first Receipt
	for i := 0; i < 3; i++ {
		r, err := put(fmt.Sprint("k", i), fmt.Sprint("op-", i))
		if err != nil {
			t.Fatalf("append %d within the burst: %v", i, err)
		}
		if i == 0 {
			first = r
		}
	}
	_, err := put("k3", "op-3")
	var re *RefusalError
	if !errors.Is(err, ErrRateLimited) || !errors.As(err, &re) || re.Anchor != "dev" || re.RetryAfter <= 0 || re.RetryAfter > 100*time.Millisecond {
		t.Fatalf("append beyond the burst: %v, want CAP_003 with a RetryAfter of at most 100ms", err)
	}
	before, tokens := db.Metrics(), db.adm.Tokens("dev")
	for i := 0; i < 5; i++ {
		r, err := put("k0", "op-0")
		if err != nil || !r.Duplicate || r.Seq != first.Seq || r.Hash != first.Hash {
			t.Fatalf("retry with the budget exhausted: %+v %v", r, err)
		}
	}
	after := db.Metrics()
	if after.Refusals != before.Refusals || after.Records != before.Records || after.Groups != before.Groups || db.adm.Tokens("dev") > tokens+0.01 {
		t.Fatalf("retries moved the counters: before %+v (tokens %.2f), after %+v (tokens %.2f)", before, tokens, after, db.adm.Tokens("dev"))
	}
	if after.Duplicates != before.Duplicates+5 {
		t.Fatalf("duplicates counted %d, want %d", after.Duplicates, before.Duplicates+5)
	}
	// The same key with another payload is still a conflict, not a refusal.
	_, err = db.Append(ctx, Entry{Anchor: "dev", Type: "put", Key: []byte("k0"), Value: []byte("other"), IdempotencyKey: []byte("op-0")})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("same key, other payload: %v, want STATE_002", err)
	}
	// Time refills the bucket.
	clk.advance(time.Second)
	if _, err := put("k3", "op-3"); err != nil {
		t.Fatalf("after the bucket refilled: %v", err)
	}
}

// TestConcurrentSameNewKey: two concurrent appends with the same new key:
// one appends, the other is its duplicate (or a conflict when the payloads
// differ), and the rate budget is taken once.
func TestConcurrentSameNewKey(t *testing.T) {
	for _, samePayload := range []bool{true, false} {
		t.Run(fmt.Sprintf("same_payload=%v", samePayload), func(t *testing.T) {
			clk := newFakeClock()
			mem := vfs.NewMem()
			db := mustOpen(t, slowSyncFS(mem, time.Millisecond), Options{AnchorRate: 1, AnchorBurst: 100, Clock: clk.now})
			defer db.Close()
			ctx := context.Background()
			for round := 0; round < 20; round++ {
				tokens := db.adm.Tokens("dev")
				var wg sync.WaitGroup
				rs := make([]Receipt, 2)
				es := make([]error, 2)
				for i := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						v := "v"
						if !samePayload {
							v = fmt.Sprint("v", i)
						}
						rs[i], es[i] = db.Append(ctx, Entry{Anchor: "dev", Type: "put", Key: []byte("k"), Value: []byte(v),
							IdempotencyKey: []byte(fmt.Sprint("round-", round))})
					}()
				}
				wg.Wait()
				appended, dup, conflict := 0, 0, 0
				for i := range 2 {
					switch {
					case es[i] == nil && !rs[i].Duplicate:
						appended++
					case es[i] == nil:
						dup++
					case errors.Is(es[i], ErrConflict):
						conflict++
					default:
						t.Fatalf("round %d: %v", round, es[i])
					}
				}
				if appended != 1 || (samePayload && dup != 1) || (!samePayload && conflict != 1) {
					t.Fatalf("round %d: %d appended, %d duplicates, %d conflicts", round, appended, dup, conflict)
				}
				if got := db.adm.Tokens("dev"); got < tokens-1.01 || got > tokens-0.99 {
					t.Fatalf("round %d: tokens went from %.2f to %.2f, want one taken", round, tokens, got)
				}
			}
		})
	}
}

// TestAdmissionProperties: rapid properties over random sequences of
// appends, retries and crash-reopens, with a rate limit tight enough to
// refuse (the fake clock makes refusals deterministic):
//
//  1. completeness: every append ends in exactly one of appended,
//     duplicate, refused, conflict;
//  2. a retry of an appended key is never refused for capacity and never
//     appended twice;
//  3. the records on disk equal the 'appended' outcomes, across crash and
//     reopen.
func TestAdmissionProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clk := newFakeClock()
		mem := vfs.NewCrashableMem()
		opts := Options{FS: mem, AnchorRate: 5, AnchorBurst: 2, Clock: clk.now, SegmentSize: 1024}
		db, err := Open("db", opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		ctx := context.Background()
		type req struct {
			anchor, key, value, idem string
		}
		appended := map[string]Receipt{} // by idempotency key
		payload := map[string]string{}
		perAnchor := map[string]uint64{}
		var all []req
		steps := rapid.IntRange(5, 60).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			switch rapid.IntRange(0, 9).Draw(rt, "action") {
			case 0: // crash and reopen
				crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
				_ = db.Close()
				mem = crashed
				opts.FS = mem
				if db, err = Open("db", opts); err != nil {
					rt.Fatalf("reopen after crash: %v", err)
				}
			case 1: // time passes
				clk.advance(time.Duration(rapid.IntRange(1, 1000).Draw(rt, "ms")) * time.Millisecond)
			default:
				var r req
				if len(all) > 0 && rapid.Bool().Draw(rt, "retry") {
					r = all[rapid.IntRange(0, len(all)-1).Draw(rt, "which")]
					if rapid.IntRange(0, 4).Draw(rt, "change") == 0 {
						r.value += "'"
					}
				} else {
					r = req{anchor: fmt.Sprint("a", rapid.IntRange(0, 2).Draw(rt, "anchor")), key: fmt.Sprint("k", step),
						value: fmt.Sprint("v", step), idem: fmt.Sprint("op-", step)}
					all = append(all, r)
				}
				rc, err := db.Append(ctx, Entry{Anchor: r.anchor, Type: "put", Key: []byte(r.key), Value: []byte(r.value), IdempotencyKey: []byte(r.idem)})
				prior, done := appended[r.idem]
				var outcome string
				switch {
				case err == nil && !rc.Duplicate:
					outcome = "appended"
				case err == nil:
					outcome = "duplicate"
				case errors.Is(err, ErrRateLimited) || errors.Is(err, ErrQueueFull) || errors.Is(err, ErrCapacityExhausted):
					outcome = "refused"
				case errors.Is(err, ErrConflict):
					outcome = "conflict"
				default:
					rt.Fatalf("append %+v: an outcome outside the four: %v", r, err)
				}
				switch {
				case done && payload[r.idem] == r.value && outcome != "duplicate":
					rt.Fatalf("retry of appended %s: %s (%v), want duplicate", r.idem, outcome, err)
				case done && payload[r.idem] == r.value && (rc.Seq != prior.Seq || rc.Hash != prior.Hash):
					rt.Fatalf("retry of %s: receipt %+v, want %+v", r.idem, rc, prior)
				case done && payload[r.idem] != r.value && outcome != "conflict":
					rt.Fatalf("same key %s, other payload: %s, want conflict", r.idem, outcome)
				case !done && (outcome == "duplicate" || outcome == "conflict"):
					rt.Fatalf("new key %s: %s", r.idem, outcome)
				}
				if outcome == "appended" {
					appended[r.idem] = rc
					payload[r.idem] = r.value
					perAnchor[r.anchor]++
				}
			}
		}
		for id, want := range perAnchor {
			info, ok, err := db.AnchorInfo(context.Background(), id)
			if err != nil || !ok || info.Records != want {
				rt.Fatalf("anchor %s: %d records, %d appended (%v)", id, info.Records, want, err)
			}
		}
		var n int
		for _, err := range db.Anchors(ctx) {
			if err != nil {
				rt.Fatal(err)
			}
			n++
		}
		if n != len(perAnchor) {
			rt.Fatalf("%d anchors on disk, %d with appends", n, len(perAnchor))
		}
	})
}

// TestAdmissionDisabled: DisableAdmission turns the bounds off but still
// gates Close.
func TestAdmissionDisabled(t *testing.T) {
	mem := vfs.NewMem()
	db := mustOpen(t, slowSyncFS(mem, 5*time.Millisecond), Options{MaxInFlightRecords: 1, RefuseWhenFull: true, DisableAdmission: true})
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := db.Put(ctx, "a", []byte(fmt.Sprint(i)), []byte("v")); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d appends failed with admission disabled", failed.Load())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("late"), []byte("v")); err == nil {
		t.Fatal("append after Close succeeded")
	}
}

// An append whose context has ended is not made, even when nothing would
// have made it wait (found by a CLI audit: Ctrl-C during `append`'s read of
// stdin still appended once stdin closed).
func TestAppendWithEndedContextAppendsNothing(t *testing.T) {
	db := mustOpen(t, vfs.NewMem(), Options{})
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("put with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := db.AppendBatch(ctx, []Entry{{Anchor: "a", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("batch with a cancelled context: %v, want context.Canceled", err)
	}
	if info, _, err := db.AnchorInfo(context.Background(), "a"); err != nil || info.Records != 0 {
		t.Fatalf("anchor after refused appends: %+v %v", info, err)
	}
}

// At the in-flight bound, an append whose context has already ended is a
// capacity refusal (SPEC §8: CAP_001, or CAP_002 with RefuseWhenFull), as
// before the ended-context check above was added; a review caught that
// check running first and returning a bare context.Canceled.
func TestEndedContextAtTheBoundIsACapacityRefusal(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refuseWhenFull=%v", refuse), func(t *testing.T) {
			db := mustOpen(t, slowSyncFS(vfs.NewMem(), 200*time.Millisecond), Options{MaxInFlightRecords: 1, RefuseWhenFull: refuse})
			defer db.Close()
			first := make(chan error, 1)
			go func() {
				_, err := db.Put(context.Background(), "a", []byte("k1"), []byte("v"))
				first <- err
			}()
			waitInFlight(t, db)
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := db.Put(ended, "b", []byte("k2"), []byte("v"))
			want := ErrCapacityExhausted
			if refuse {
				want = ErrQueueFull
			}
			if !errors.Is(err, want) {
				t.Fatalf("append at the bound with an ended context: %v, want %v", err, want)
			}
			if err := <-first; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A rate-limit refusal carries the capacity state like the bound refusals
// (DESIGN.md, "Admission": every refusal does); a CAP_003 with zero bounds
// would have the CLI leave them out of its JSON.
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

// A clock that steps back (Options.Clock need not be monotonic: a wall
// clock corrected by NTP) counts as no time passing, and the bucket refills
// from the new time. Refilling only once the clock came back to where it
// had been would refuse the anchor for an hour after a step back of an
// hour, each time with a RetryAfter of 100 ms.
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
	if got := db.adm.Tokens("dev"); got < -1e-9 || got > 1 {
		t.Fatalf("%.9f tokens after the append, want about 0", got)
	}
}

// Limits that let one record exceed what one append may carry
// (MaxBatchBytes) are refused at Open, naming both: Validate allows values
// up to the format's 512 MiB, and a 300 MiB value limit taken at Open
// would fail every append at it against another limit.
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
