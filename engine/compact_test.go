package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// fixtureOptions are the options compactFixture's database is written with.
func fixtureOptions(fs vfs.FS) Options {
	return Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64}
}

// compactFixture fills a database with enough records to seal several
// segments per anchor, with values both inline and in segments.
func compactFixture(t *testing.T, fs vfs.FS) (*DB, map[string]string) {
	t.Helper()
	ctx := context.Background()
	db, err := Open("db", fixtureOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i < 400; i++ {
		a := fmt.Sprintf("a%d", i%3)
		k := fmt.Sprintf("k%03d", i%50)
		v := fmt.Sprintf("v%d", i)
		if i%7 == 0 {
			v += string(bytes.Repeat([]byte("L"), 100)) // beyond InlineValueMax
		}
		if i%11 == 5 {
			if _, err := db.Delete(ctx, a, []byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
			continue
		}
		if _, err := db.Put(ctx, a, []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	return db, want
}

func checkState(t *testing.T, db *DB, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	got := map[string]string{}
	for v, err := range db.Scan(ctx, nil) {
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		got[string(v.Key)] = string(v.Value)
	}
	if len(got) != len(want) {
		t.Fatalf("state has %d keys, want %d", len(got), len(want))
	}
	for k, w := range want {
		v, err := db.Get(ctx, []byte(k))
		if err != nil || string(v.Value) != w || got[k] != w {
			t.Fatalf("get %s = %q %v, want %q", k, v.Value, err, w)
		}
	}
}

var truncatePolicy = snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1},
	KeepSnapshots: 1, RawLog: "truncate", VerifyBeforeDelete: true}

func TestCompactTruncatesAndRebuilds(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, want := compactFixture(t, fs)
	// Dry run: a plan, nothing changes.
	res, err := db.Compact(ctx, truncatePolicy, CompactOptions{})
	if err != nil || res.Applied || len(res.Plan.Actions) == 0 || res.Plan.Actions[0].Kind != snapshot.ActionCreateSnapshot {
		t.Fatalf("dry run: %+v %v", res, err)
	}
	if list, _ := db.Snapshots(ctx); len(list) != 0 {
		t.Fatal("a dry run created a snapshot")
	}
	// First run: a snapshot; the plan cannot cut below a snapshot it is only
	// about to create.
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	// More writes, then a second run: a new snapshot, the old one deleted,
	// segments below the oldest kept snapshot removed.
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("k%03d", 100+i)
		if _, err := db.Put(ctx, "a1", []byte(k), []byte("late")); err != nil {
			t.Fatal(err)
		}
		want[k] = "late"
	}
	res, err = coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.RemovedBytes == 0 {
		t.Fatalf("nothing truncated: %s", res.Plan)
	}
	checkState(t, db, want)
	// The log is held whole from the cut on; below it, the kept records
	// and STATE_003 for the rest, every seq once.
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		first, err := db.firstPresent(info.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkLogCovers(t, db, info.ID, 1, info.Records, first)
		if first > 1 {
			if _, err := db.Record(ctx, info.ID, 1); err != nil && !errors.Is(err, ErrDependencyMissing) {
				t.Fatalf("record below the cut: %v", err)
			}
			// The state at a frontier inside the truncated log is unknown.
			if _, err := db.GetAt(ctx, []byte("k001"), merge.Frontier{info.ID: 1}); !errors.Is(err, ErrDependencyMissing) {
				t.Fatalf("getat below the cut: %v, want STATE_003", err)
			}
		}
	}
	// Audit log: an unbroken chain naming every removal.
	head, err := snapshot.VerifyAudit(fs, db.AuditPath())
	if err != nil || head.Lines == 0 {
		t.Fatalf("audit: %+v %v", head, err)
	}
	if _, err := db.VerifyAuditLog(ctx); err != nil {
		t.Fatalf("audit head: %v", err)
	}
	// keep_snapshots 1, but a plan never deletes the newest existing
	// snapshot while it creates the next: two remain until the next run.
	list, _ := db.Snapshots(ctx)
	if len(list) != 2 {
		t.Fatalf("%d snapshots kept, want 2", len(list))
	}
	for _, s := range list {
		v, err := db.VerifySnapshot(ctx, s.Path)
		if err != nil {
			t.Fatalf("verify kept snapshot %s: %v (%+v)", s.Name, err, v)
		}
		t.Logf("%s: replayed=%v base=%q note=%q", s.Name, v.Replayed, v.Base, v.Note)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The index lost: rebuilt from stubs and segments alone.
	if err := fs.RemoveAll("db/index"); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", fixtureOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep := db.RecoveryReport()
	for _, ev := range rep.Events {
		if ev.Kind == EventDamaged {
			t.Fatalf("rebuild: %v", ev)
		}
	}
	if !rep.Rebuilt {
		t.Fatalf("rebuild report: %+v", rep)
	}
	checkState(t, db, want)
	if _, err := db.Put(ctx, "a0", []byte("after-rebuild"), []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// TestCompactCrashAtEveryWrite crashes at every write of a compaction with
// truncation: every crash state opens, reads the same state, keeps a
// snapshot that covers the cut, and has an audit log without a gap.
func TestCompactCrashAtEveryWrite(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db, want := compactFixture(t, mem)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("k%03d", 200+i)
		if _, err := db.Put(ctx, "a2", []byte(k), []byte("late")); err != nil {
			t.Fatal(err)
		}
		want[k] = "late"
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var clones []*vfs.MemFS
	var capture atomic.Bool
	rng := rand.New(rand.NewPCG(3, 4))
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		// NB: no clones during Open. Pebble creates a manifest and then
		// moves its marker before one directory fsync covers both; MemFS
		// lets either directory entry survive alone, which a journaling
		// filesystem does not, and Pebble cannot open the result. The
		// compaction is what this test is about.
		if capture.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			mu.Lock()
			clones = append(clones, testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 30, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}))
			mu.Unlock()
		}
		return nil
	})
	db, err := Open("db", fixtureOptions(errorfs.Wrap(testutil.LockOrdered(mem), inj)))
	if err != nil {
		t.Fatal(err)
	}
	capture.Store(true)
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true, Now: time.Now()})
	capture.Store(false)
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	_ = db.Close()
	t.Logf("%d crash points", len(clones))
	for i, c := range clones {
		if i%testutil.RaceStride(16) != 0 && i != len(clones)-1 {
			continue
		}
		db, err := Open("db", fixtureOptions(c))
		if err != nil {
			t.Fatalf("crash point %d: open: %v", i, err)
		}
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == EventDamaged {
				t.Fatalf("crash point %d: %v", i, ev)
			}
		}
		checkState(t, db, want)
		if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
			t.Fatalf("crash point %d: verify: %v %+v", i, err, rep.Failures)
		}
		if _, err := db.VerifyAuditLog(ctx); err != nil {
			t.Fatalf("crash point %d: audit log: %v", i, err)
		}
		list, _ := db.Snapshots(ctx)
		usable := 0
		for _, s := range list {
			if s.Err == nil {
				usable++
			}
		}
		if usable == 0 {
			t.Fatalf("crash point %d: no usable snapshot left", i)
		}
		// A compaction after the crash finishes the job.
		if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
			t.Fatalf("crash point %d: compact again: %v", i, err)
		}
		checkState(t, db, want)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRebuildKeepsAuditHead: the index keeps the audit log's head, which is
// what tells a lost last line from a log that never had it. A rebuilt
// index takes it from the log as it finds it, so a line lost after the
// rebuild is still caught.
func TestRebuildKeepsAuditHead(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	head, err := db.VerifyAuditLog(ctx)
	if err != nil || head.Lines < 1 {
		t.Fatalf("audit log: %+v %v", head, err)
	}
	dir := db.dir
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := RebuildIndex(ctx, dir, fixtureOptions(fs), true); err != nil {
		t.Fatal(err)
	}
	// The last line goes: the log still chains, but it is short.
	data, err := testutil.ReadFile(fs, fs.PathJoin(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	short := bytes.Join(lines[:len(lines)-1], nil)
	f, err := fs.Create(fs.PathJoin(dir, "audit.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(short); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	db, err = Open(dir, fixtureOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.VerifyAuditLog(ctx); !errors.Is(err, ErrChainBroken) {
		t.Fatalf("an audit log short of its last line after a rebuild: want INT_002, got %v", err)
	}
}

// coveredCompact signs a checkpoint of everything written so far, with
// coverKeys' key, then runs the compaction: a truncation cuts only what the
// newest stored checkpoint covers (SPEC §6).
func coveredCompact(t testing.TB, db *DB, policy snapshot.Policy, opts CompactOptions) (CompactionResult, error) {
	t.Helper()
	skey, _ := coverKeys(t)
	if _, _, err := db.CreateCheckpoint(context.Background(), skey); err != nil {
		t.Fatal(err)
	}
	return db.Compact(context.Background(), policy, opts)
}

var coverKeyPair struct {
	once       sync.Once
	skey, vkey string
	err        error
}

// coverKeys returns the signer and verifier keys of coveredCompact's
// checkpoints: a verify given keys must be given this one too.
func coverKeys(t testing.TB) (skey, vkey string) {
	t.Helper()
	k := &coverKeyPair
	k.once.Do(func() { k.skey, k.vkey, k.err = proof.GenerateKeys("cover.test/anchordb") })
	if k.err != nil {
		t.Fatal(k.err)
	}
	return k.skey, k.vkey
}
