package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Error injection in the style of Pebble's TestErrors: fail the i-th
// filesystem operation for i = 0, 1, 2, … until the workload runs through
// without the failure firing. Every failure must surface as a coded error
// (IO_001 once a write or fsync failed, and from then on for every write),
// never as a panic, a hang or an acknowledged append that is later missing.
// After each run the filesystem is reopened without injection — as it stands
// (a process restart) and as a power loss right after would leave it — and
// must pass checkDB with every acknowledged append present.
//
// The loops run in child processes (see child_test.go), so a panic on a
// goroutine the test cannot recover — Pebble's flush, for one — fails its
// iteration instead of the test binary. To rerun one iteration by hand:
//
//	ANCHORDB_TEST_LOOP=inj/writes,59,100000 go test -run '^TestErrorInjection$' -v ./engine/
//	ANCHORDB_TEST_LOOP=rec/late/all-ops,133,100000 go test -run '^TestErrorsDuringRecovery$' -v ./engine/

// injOptions are small enough that the short workload below seals segments
// and settles.
func injOptions(fs vfs.FS, noSync bool) Options {
	return Options{FS: fs, SegmentSize: 4096, SettleBytes: 2500, NoSync: noSync}
}

var injAnchors = []string{"inj-a", "inj/b", "inj-ü"}

// injWorkload is a small deterministic single-writer workload: idempotent
// puts and their retries, deletes, events, batches across anchors, a value
// too large to inline, an explicit Sync and some reads. It stops at the first
// error and returns it.
func injWorkload(ctx context.Context, db *DB, acks *ackLog) error {
	for i := 0; i < 30; i++ {
		an := injAnchors[i%len(injAnchors)]
		key := []byte(fmt.Sprintf("k%d", i%5))
		val := bytes.Repeat([]byte{byte('a' + i%26)}, 380)
		var err error
		switch i % 6 {
		case 0:
			e := Entry{Anchor: an, Type: segment.TypePut, Key: key, Value: val, IdempotencyKey: []byte(fmt.Sprint("op-", i))}
			var r, r2 Receipt
			if r, err = db.Append(ctx, e); err == nil {
				acks.add(e, r)
				if r2, err = db.Append(ctx, e); err == nil && (!r2.Duplicate || r2.Seq != r.Seq || r2.Hash != r.Hash) {
					return fmt.Errorf("retry of %s got %+v, want a duplicate of %+v", e.IdempotencyKey, r2, r)
				}
			}
		case 1:
			e := Entry{Anchor: an, Type: segment.TypeDelete, Key: key}
			var r Receipt
			if r, err = db.Append(ctx, e); err == nil {
				acks.add(e, r)
			}
		case 2:
			e := Entry{Anchor: an, Type: "TELEMETRY", Value: val[:200]}
			var r Receipt
			if r, err = db.Append(ctx, e); err == nil {
				acks.add(e, r)
			}
		case 3:
			es := []Entry{
				{Anchor: an, Type: segment.TypePut, Key: key, Value: val[:100]},
				{Anchor: injAnchors[(i+1)%3], Type: segment.TypePut, Key: []byte("shared"), Value: val[:150], IdempotencyKey: []byte(fmt.Sprint("b-", i))},
				{Anchor: injAnchors[(i+2)%3], Type: "AUDIT", Value: val[:50]},
			}
			var rs []Receipt
			if rs, err = db.AppendBatch(ctx, es); err == nil {
				for j := range rs {
					acks.add(es[j], rs[j])
				}
			}
		default:
			if i == 4 {
				val = bytes.Repeat([]byte("L"), 5000) // not inline: Get reads the segment
			}
			e := Entry{Anchor: an, Type: segment.TypePut, Key: key, Value: val}
			var r Receipt
			if r, err = db.Append(ctx, e); err == nil {
				acks.add(e, r)
			}
		}
		if err != nil {
			return err
		}
		switch i {
		case 13:
			if err := db.Sync(context.Background()); err != nil {
				return err
			}
		case 20:
			for _, k := range []string{"k0", "k4", "shared"} {
				if _, err := db.Get(ctx, []byte(k)); err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
			}
			for _, r := range acks.snapshot()[:3] {
				if _, err := db.Record(ctx, r.Receipt.Anchor, r.Seq); err != nil {
					return err
				}
			}
			for _, err := range db.Log(ctx, injAnchors[1], 1, 0) {
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// withTimeout runs fn on the calling goroutine (so it may use t.Fatal) and
// turns a hang into a failure: if fn has not returned after d, the test
// binary panics with every goroutine's stack. A hung engine cannot be
// recovered from, and this names it at once instead of at the -timeout.
func withTimeout(t testing.TB, d time.Duration, what string, fn func() error) error {
	t.Helper()
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		// The engine's goroutines first: they are the ones that hang.
		var engine, other []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "anchordb/engine.(*") && !strings.Contains(g, "withTimeout.func") {
				engine = append(engine, g)
			} else {
				other = append(other, g)
			}
		}
		panic(fmt.Sprintf("%s: %s: no return after %v (hang). Engine goroutines:\n%s\n\nOther goroutines:\n%s",
			name, what, d, strings.Join(engine, "\n\n"), strings.Join(other, "\n\n")))
	})
	defer timer.Stop()
	return fn()
}

func isWriteOp(op errorfs.Op) bool { return op.Kind.ReadOrWrite() == errorfs.OpIsWrite }

func isSyncOp(op errorfs.Op) bool {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return true
	}
	return false
}

// engineOwned reports whether path is a file of the engine's own (journal or
// segment), not of the Pebble index.
func engineOwned(path string) bool {
	return strings.Contains(path, "/"+JournalDir+"/") || strings.Contains(path, "/"+segment.AnchorsDir+"/")
}

func opString(ops []errorfs.Op) string {
	var b strings.Builder
	for i, op := range ops {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s@%d", opKindName(op.Kind), op.Path, op.Offset)
	}
	return b.String()
}

func opKindName(k errorfs.OpKind) string {
	names := map[errorfs.OpKind]string{
		errorfs.OpCreate: "create", errorfs.OpLink: "link", errorfs.OpOpen: "open", errorfs.OpOpenDir: "opendir",
		errorfs.OpRemove: "remove", errorfs.OpRemoveAll: "removeall", errorfs.OpRename: "rename",
		errorfs.OpReuseForWrite: "reuse", errorfs.OpMkdirAll: "mkdirall", errorfs.OpLock: "lock",
		errorfs.OpList: "list", errorfs.OpFilePreallocate: "preallocate", errorfs.OpStat: "stat",
		errorfs.OpGetDiskUsage: "diskusage", errorfs.OpFileClose: "close", errorfs.OpFileRead: "read",
		errorfs.OpFileReadAt: "readat", errorfs.OpFileWrite: "write", errorfs.OpFileWriteAt: "writeat",
		errorfs.OpFileStat: "fstat", errorfs.OpFileSync: "sync", errorfs.OpFileSyncData: "syncdata",
		errorfs.OpFileSyncTo: "syncto", errorfs.OpFileFlush: "flush",
	}
	if n, ok := names[k]; ok {
		return n
	}
	return fmt.Sprint(int(k))
}

// injCase is one way of failing operations.
type injCase struct {
	name       string
	mode       faultMode
	writesOnly bool // count and fail write operations only
	noSync     bool
	// Every step-th index is tried (every shortStep-th under -short), from
	// an offset that varies with the day so strided runs cover every index
	// over time; ANCHORDB_INJ_FULL=1 tries them all.
	step, shortStep int
}

// injector fails the i-th operation (the i-th write with writesOnly).
func (c injCase) injector(i int) errorfs.Injector {
	var pred errorfs.Predicate = errorfs.OnIndex(int32(i))
	if c.writesOnly {
		pred = errorfs.And(errorfs.Writes, errorfs.OnIndex(int32(i)))
	}
	return errorfs.ErrInjected.If(pred)
}

// fs returns the filesystem the engine sees for this case: errorfs itself
// for plain failures, our faultFS for the failures errorfs cannot model.
func (c injCase) fs(mem *vfs.MemFS, inj errorfs.Injector) (vfs.FS, *faultFS) {
	if c.mode == faultPlain {
		// faultFS without an injector is only used for its crash states.
		return errorfs.Wrap(testutil.LockOrdered(mem), inj), newFaultFS(mem, nil, faultPlain)
	}
	ffs := newFaultFS(mem, inj, c.mode)
	return ffs, ffs
}

// recordingInjector remembers the operation its injector failed (errorfs
// does not say), so a run knows whether, and where, the failure fired.
type recordingInjector struct {
	errorfs.Injector
	fired atomic.Pointer[errorfs.Op]
	// onIndexFailure, if set, runs when a failure is injected into the index:
	// Pebble may end the process over it on a goroutine of its own (a
	// MANIFEST or marker write), so the test saves the crash states first.
	onIndexFailure atomic.Pointer[func()]
}

func (r *recordingInjector) MaybeError(op errorfs.Op) error {
	err := r.Injector.MaybeError(op)
	if err != nil {
		r.fired.Store(&op)
		if f := r.onIndexFailure.Load(); f != nil && strings.Contains(op.Path, IndexDir) {
			(*f)()
		}
	}
	return err
}

// injOutcome is what one run under injection did.
type injOutcome struct {
	fired   *errorfs.Op
	openErr error
	workErr error
	acked   []ackedEntry
}

func (o injOutcome) String() string {
	fired := "nothing fired"
	if o.fired != nil {
		fired = "failed " + opString([]errorfs.Op{*o.fired})
	}
	return fmt.Sprintf("%s; open error: %v; workload error: %v; %d appends acknowledged", fired, o.openErr, o.workErr, len(o.acked))
}

// runInjected opens a fresh database on fs, runs the workload and checks how
// the failure surfaced. It closes the database before returning.
func runInjected(t *testing.T, c injCase, fs vfs.FS, rec *recordingInjector, onFatal func(*ackLog) func(string)) injOutcome {
	t.Helper()
	ctx := context.Background()
	acks := &ackLog{}
	var out injOutcome
	err := withTimeout(t, 30*time.Second, "open, workload and close under injection", func() error {
		opts := injOptions(fs, c.noSync)
		if onFatal != nil {
			hook := onFatal(acks)
			opts.fatalHook = hook
			save := func() { hook("injected into the index") }
			rec.onIndexFailure.Store(&save)
		}
		db, err := Open("db", opts)
		out.fired = rec.fired.Load()
		if err != nil {
			out.openErr = err
			if out.fired == nil {
				return fmt.Errorf("open failed with no injected failure: %v", err)
			}
			if CodeOf(err) == "" {
				return fmt.Errorf("open failed with an uncoded error: %v", err)
			}
			return nil
		}
		werr := injWorkload(ctx, db, acks)
		out.fired = rec.fired.Load()
		out.workErr = werr
		var failures []string
		if werr != nil {
			switch {
			case out.fired == nil:
				failures = append(failures, fmt.Sprintf("workload failed with no injected failure: %v", werr))
			case CodeOf(werr) == "":
				failures = append(failures, fmt.Sprintf("workload failed with an uncoded error: %v", werr))
			case isWriteOp(*out.fired) && !errors.Is(werr, ErrWriteFailed):
				failures = append(failures, fmt.Sprintf("a failed write surfaced as %s, want IO_001: %v", CodeOf(werr), werr))
			}
		}
		// Once a write or fsync of the engine's failed and was reported, or
		// an fsync of a journal or segment failed at all, every write must be
		// refused with IO_001: no retry of a failed fsync that then reports
		// success.
		mustStop := out.fired != nil && isWriteOp(*out.fired) && errors.Is(werr, ErrWriteFailed)
		if out.fired != nil && isSyncOp(*out.fired) && engineOwned(out.fired.Path) {
			mustStop = true
			// A background settle may have hit the failure after the
			// workload's last append: give it a moment to stop the engine.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				e := Entry{Anchor: "probe", Type: segment.TypePut, Key: []byte("probe"), Value: []byte("p")}
				r, err := db.Append(ctx, e)
				if err != nil {
					break
				}
				acks.add(e, r)
				time.Sleep(5 * time.Millisecond)
			}
		}
		if mustStop {
			for j, try := range []func() error{
				func() error {
					_, err := db.Put(ctx, injAnchors[0], []byte("after"), []byte("failure"))
					return err
				},
				func() error {
					_, err := db.Put(ctx, "never-seen-anchor", []byte("after"), []byte("failure"))
					return err
				},
				func() error {
					_, err := db.AppendBatch(ctx, []Entry{
						{Anchor: injAnchors[1], Type: segment.TypePut, Key: []byte("x"), Value: []byte("y")},
						{Anchor: injAnchors[2], Type: "EV", Value: []byte("z")},
					})
					return err
				},
				func() error {
					_, err := db.Append(ctx, Entry{Anchor: injAnchors[0], Type: segment.TypePut, Key: []byte("k0"),
						Value: bytes.Repeat([]byte{'a'}, 380), IdempotencyKey: []byte("op-0")})
					return err
				},
				func() error {
					_, err := db.Put(ctx, injAnchors[1], []byte("after"), []byte("failure"), WithNoSync(true))
					return err
				},
				func() error { return db.Sync(ctx) },
			} {
				if err := try(); !errors.Is(err, ErrWriteFailed) {
					failures = append(failures, fmt.Sprintf("write %d after the failure (%v) was not refused with IO_001: got %v", j, werr, err))
				}
			}
		}
		cerr := db.Close()
		if werr == nil && rec.fired.Load() == nil && cerr != nil {
			failures = append(failures, fmt.Sprintf("close with no injected failure: %v", cerr))
		}
		if cerr != nil && CodeOf(cerr) == "" && !strings.Contains(cerr.Error(), "IO_001") {
			failures = append(failures, fmt.Sprintf("close failed with an uncoded error: %v", cerr))
		}
		if len(failures) > 0 {
			return errors.New(strings.Join(failures, "\n"))
		}
		return nil
	})
	out.acked = acks.snapshot()
	out.fired = rec.fired.Load()
	if err != nil {
		t.Fatalf("%v\n(%s)", err, out)
	}
	return out
}

// checkReopen reopens a state without injection, checks it and writes to it.
func checkReopen(t *testing.T, what string, fs vfs.FS, noSync bool, acked []ackedEntry, dir ...string) {
	t.Helper()
	ctx := context.Background()
	path := "db"
	if len(dir) > 0 {
		path = dir[0]
	}
	err := withTimeout(t, 30*time.Second, what+": reopen", func() error {
		db, err := Open(path, injOptions(fs, noSync))
		if err != nil {
			return fmt.Errorf("%s: reopen without injection: %v", what, err)
		}
		defer db.Close()
		rep := db.RecoveryReport()
		t.Logf("info: checking %s (clean: %v, rebuilt: %v, recovery: %v)", what, rep.Clean, rep.Rebuilt, rep.Events)
		checkDB(t, db, acked)
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == EventDamaged {
				return fmt.Errorf("%s: recovery reports damage: %v", what, ev)
			}
		}
		more := &ackLog{}
		if err := workload(ctx, db, 1, 7, more); err != nil {
			return fmt.Errorf("%s: the recovered database refuses writes: %v", what, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var injCases = []injCase{
	{name: "writes", mode: faultPlain, writesOnly: true, step: 1, shortStep: 4},
	{name: "all-ops", mode: faultPlain, step: 3, shortStep: 13},
	{name: "drop-unsynced", mode: faultDropUnsynced, writesOnly: true, step: 2, shortStep: 7},
	{name: "torn-write", mode: faultTornWrite, writesOnly: true, step: 2, shortStep: 7},
	{name: "garbage", mode: faultGarbage, writesOnly: true, step: 2, shortStep: 7},
	{name: "nosync-writes", mode: faultPlain, writesOnly: true, noSync: true, step: 3, shortStep: 11},
}

// loopStep returns the step and first index for a case.
func (c injCase) loopStep() (step, start int) {
	step = c.step
	if testing.Short() {
		step = c.shortStep
	}
	if os.Getenv("ANCHORDB_INJ_FULL") == "1" || step <= 1 {
		return 1, 0
	}
	return step, time.Now().YearDay() % step
}

func TestErrorInjection(t *testing.T) {
	if childLoop(t, injLoop) {
		return
	}
	for _, c := range injCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			step, start := c.loopStep()
			superviseLoop(t, "TestErrorInjection", "inj/"+c.name, start, step)
		})
	}
}

// injLoop builds, in a child process, the loop of one injCase.
func injLoop(t *testing.T, id string) loopFunc {
	var c injCase
	for _, cc := range injCases {
		if "inj/"+cc.name == id {
			c = cc
		}
	}
	if c.name == "" {
		t.Fatalf("unknown loop %q", id)
	}
	return func(t *testing.T, i int) bool {
		mem := vfs.NewCrashableMem()
		rec := &recordingInjector{Injector: c.injector(i)}
		fs, ffs := c.fs(mem, rec)
		defer cleanupFatalDirs()
		out := runInjected(t, c, fs, rec, func(acks *ackLog) func(string) {
			return fatalSaver(ffs, acks, c.noSync, uint64(i))
		})
		t.Logf("info: %s", out)
		// A process restart: everything written is still there, except
		// what a failed fsync dropped.
		checkReopen(t, "restart", ffs.crashState(100, uint64(i)), c.noSync, out.acked)
		// A power loss right after: only synced data survives.
		acked := out.acked
		if c.noSync {
			acked = nil
		}
		checkReopen(t, "power loss", ffs.crashState(0, uint64(i)), c.noSync, acked)
		return out.fired == nil
	}
}

// TestCloseAfterWriteFailure: once the engine has stopped on a failed fsync,
// Close must still return, whatever the background settle was doing at the
// time. Appends race a settle after every commit group while the journal's
// fsyncs start failing, then Close is given ten seconds.
func TestCloseAfterWriteFailure(t *testing.T) {
	ctx := context.Background()
	// The window is narrow: -race (which slows the engine's goroutines)
	// finds it within a few hundred rounds.
	dur := 2 * time.Second
	if testing.Short() {
		dur = 500 * time.Millisecond
	}
	rng := newRand(uint64(time.Now().UnixNano()))
	rounds := 0
	for end := time.Now().Add(dur); time.Now().Before(end); rounds++ {
		mem := vfs.NewMem()
		var failing atomic.Bool
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if failing.Load() && (isSyncOp(op) || op.Kind == errorfs.OpFileWriteAt) && strings.Contains(op.Path, "/"+JournalDir+"/") {
				return errorfs.ErrInjected
			}
			return nil
		})
		db, err := Open("db", Options{FS: errorfs.Wrap(testutil.LockOrdered(mem), inj), SegmentSize: 4096, SettleBytes: 1, SettleInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					if _, err := db.Put(ctx, fmt.Sprintf("close-%d", w), []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
						return
					}
				}
			}(w)
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		failing.Store(true)
		wg.Wait()
		done := make(chan error, 1)
		go func() { done <- db.Close() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			var engine []string
			for _, g := range strings.Split(string(buf), "\n\n") {
				if strings.Contains(g, "anchordb/engine.(*") {
					engine = append(engine, g)
				}
			}
			t.Fatalf("round %d: Close has not returned 10 s after the engine stopped on a failed fsync (hang). Engine goroutines:\n%s",
				rounds, strings.Join(engine, "\n\n"))
		}
	}
	t.Logf("%d rounds", rounds)
}
