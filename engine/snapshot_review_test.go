package engine

// Regression tests from stop 20's review of snapshots, the retention policy
// and compaction: each failed on the code before its fix.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A snapshot is durable when CreateSnapshot returns, so the records its
// frontier names must be too: with NoSync appends in the index but not yet
// fsynced in the journal, a power loss after the snapshot was written left
// a snapshot (in the audit log, too) whose frontier the log no longer held,
// and verify failed (INT_003) on a database nobody had touched.
func TestSnapshotOfNoSyncAppendsSurvivesPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	var mu sync.Mutex
	var clones []*vfs.MemFS
	var capture atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if capture.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			mu.Lock()
			clones = append(clones, testutil.CrashClone(mem, vfs.CrashCloneCfg{})) // every unsynced byte lost
			mu.Unlock()
		}
		return nil
	})
	opts := Options{SegmentSize: 4096}
	db := mustOpen(t, errorfs.Wrap(testutil.LockOrdered(mem), inj), opts)
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("synced")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("nosync"), WithNoSync(true)); err != nil {
			t.Fatal(err)
		}
	}
	capture.Store(true)
	info, err := db.CreateSnapshot(ctx, "")
	capture.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d crash points; snapshot %s at %v", len(clones), info.Name, info.Frontier)
	for i, c := range clones {
		o := opts
		o.FS = c
		db, err := Open("db", o)
		if err != nil {
			t.Fatalf("crash point %d: open: %v", i, err)
		}
		list, err := db.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if v, err := db.VerifySnapshot(ctx, s.Path); err != nil {
				t.Fatalf("crash point %d: snapshot %s at %v does not verify: %v (%+v)", i, s.Name, s.Frontier, err, v)
			}
		}
		if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
			t.Fatalf("crash point %d: verify: %v %+v", i, err, rep.Failures)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Compactions that snapshot and truncate while writers append to the same
// anchors and readers read them: every acknowledged write is in the final
// state, every read answers or refuses with a code a caller can act on, and
// the database verifies.
func TestCompactRacingAppendsAndReads(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	const writers = 3
	want := make([]map[string]string, writers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Value
	fail := func(err error) { failed.CompareAndSwap(nil, err) }
	for w := 0; w < writers; w++ {
		want[w] = map[string]string{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			anchor := fmt.Sprintf("a%d", w)
			for i := 0; i < 1500; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-k%02d", w, i%40)
				v := fmt.Sprintf("v%d-%s", i, strings.Repeat("x", i%3*40))
				var err error
				if i%13 == 7 {
					_, err = db.Delete(ctx, anchor, []byte(k))
					delete(want[w], k)
				} else {
					_, err = db.Put(ctx, anchor, []byte(k), []byte(v))
					want[w][k] = v
				}
				if err != nil {
					fail(fmt.Errorf("append: %w", err))
					return
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := []byte(fmt.Sprintf("w%d-k%02d", i%writers, i%40))
			if _, err := db.Get(ctx, k); err != nil && !errors.Is(err, ErrNotFound) {
				fail(fmt.Errorf("get %s: %w", k, err))
			}
			for _, err := range db.History(ctx, k) {
				if err != nil {
					fail(fmt.Errorf("history %s: %w", k, err))
					break
				}
			}
			for _, err := range db.Scan(ctx, []byte(fmt.Sprintf("w%d-", i%writers))) {
				if err != nil {
					fail(fmt.Errorf("scan: %w", err))
					break
				}
			}
		}
	}()
	removed := int64(0)
	for round := 0; round < 6 && failed.Load() == nil; round++ {
		time.Sleep(50 * time.Millisecond)
		res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
		if err != nil {
			fail(fmt.Errorf("compact round %d: %w", round, err))
			break
		}
		removed += res.RemovedBytes
	}
	close(stop)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	if removed == 0 {
		t.Fatal("no compaction truncated anything")
	}
	all := map[string]string{}
	for _, m := range want {
		for k, v := range m {
			all[k] = v
		}
	}
	checkState(t, db, all)
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Failures)
	}
}

// A snapshot a compaction creates and then fails to prove by replay must
// not stay behind as the database's: it is in the audit log (created before
// it is proved), so a later run counted it as the newest verified snapshot,
// deleted the older one that did prove, and would cut the log below it
// with no replay. It goes again, audited, like one that cannot be replayed.
func TestCompactRemovesANewSnapshotThatFailsItsReplay(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1},
		KeepSnapshots: 1, RawLog: "forever", VerifyBeforeDelete: true}
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil || res.Created == nil {
		t.Fatalf("first compaction: %+v %v", res, err)
	}
	good := res.Created.Name
	rc, err := db.Put(ctx, "a", []byte("k00"), []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get(ctx, []byte("k00")); err != nil { // applied to the index
		t.Fatal(err)
	}
	// The index goes wrong about k00 (the kind of fault a replay proof is
	// there to catch): its newest version now says "bad".
	vk := schema.VersionKey([]byte("k00"), rc.Counter, "a")
	row, closer, err := db.index.Get(vk)
	if err != nil {
		t.Fatal(err)
	}
	ve, err := schema.DecodeVersion(row)
	closer.Close()
	if err != nil || !ve.Inline {
		t.Fatalf("version row: %+v %v", ve, err)
	}
	ve.Value = []byte("bad")
	if err := db.index.Set(vk, ve.Append(nil), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Compact(ctx, policy, CompactOptions{Apply: true}); !errors.Is(err, ErrSnapshotCorrupted) {
		t.Fatalf("compaction with a snapshot that fails its replay: %v, want INT_003", err)
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if _, err := db.VerifySnapshot(ctx, s.Path); err != nil {
			t.Errorf("snapshot %s left behind does not prove by replay: %v", s.Name, err)
		}
	}
	// The next run must not replace the good snapshot with the bad one.
	plan, err := db.Compact(ctx, policy, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range plan.Plan.Actions {
		if a.Kind == snapshot.ActionDeleteSnapshot && a.Snapshot == good {
			t.Errorf("the next plan deletes %s, the last snapshot that proved by replay: %s", good, plan.Plan)
		}
	}
}

// A replay that starts from the snapshot being verified proves nothing
// about it. replayBase left the target out by comparing paths, so the same
// file named another way (an absolute path for a relative one, which is
// what `anchordb snapshot verify PATH` passes) became its own base, and a
// snapshot rewritten with other values after the log below it was
// truncated "proved" by a replay of zero records.
func TestVerifySnapshotIsNotItsOwnBase(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a1", 30, "late")
	if res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %v %s", err, res.Plan)
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var target *snapshot.Info
	for i := range list {
		v, err := db.VerifySnapshot(ctx, list[i].Path)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Replayed {
			target = &list[i]
		}
	}
	if target == nil {
		t.Fatal("no snapshot below which the log was truncated without a base")
	}
	// Rewrite it with another value for one key: well-formed, same frontier.
	s, err := snapshot.Open(fs, target.Path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []snapshot.Entry
	for e, err := range s.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e.Clone())
	}
	s.Close()
	entries[0].Value = []byte("forged")
	forged, err := snapshot.Create(fs, "forge", snapshot.Meta{Frontier: target.Frontier, Created: target.Created},
		func(yield func(snapshot.Entry, error) bool) {
			for _, e := range entries {
				if !yield(e, nil) {
					return
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, fs, target.Path, readAll(t, fs, forged.Path))
	// The same file, named from the root.
	v, err := db.VerifySnapshot(ctx, "/"+target.Path)
	if err == nil && v.Replayed {
		t.Fatalf("a snapshot rewritten with another value proves by replay from base %q (%d records replayed): %+v", v.Base, v.ReplayedRecords, v)
	}
}

// An audit line the database wrote and recorded as its head is never
// written over. A damaged last line looks like a torn append to the log
// alone, and a log short of its last lines looks like one never written:
// the next audited action took the line's place, recorded itself as the
// head, and the record of what was removed was gone with nothing left for
// verify to find. Only the index's head tells them apart: the append is
// refused (INT_002) and verify keeps reporting the loss.
func TestAuditNeverOverwritesAnAcknowledgedLine(t *testing.T) {
	for _, damage := range []string{"altered", "removed"} {
		t.Run(damage, func(t *testing.T) {
			ctx := context.Background()
			fs := vfs.NewMem()
			db := mustOpen(t, fs, Options{})
			defer db.Close()
			if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if _, err := db.CreateSnapshot(ctx, ""); err != nil {
					t.Fatal(err)
				}
			}
			data := readAll(t, fs, db.AuditPath())
			lines := bytes.SplitAfter(data, []byte("\n"))
			last := lines[len(lines)-2] // the final element is empty
			switch damage {
			case "altered":
				i := bytes.Index(last, []byte(`"bytes":`)) + len(`"bytes":`)
				last[i] = '9' // same length, newline kept
			case "removed":
				data = data[:len(data)-len(last)]
			}
			writeAll(t, fs, db.AuditPath(), data)
			if _, err := db.VerifyAuditLog(ctx); !errors.Is(err, ErrChainBroken) {
				t.Fatalf("audit log with its last line %s: %v, want INT_002", damage, err)
			}
			if _, err := db.CreateSnapshot(ctx, ""); !errors.Is(err, ErrChainBroken) {
				t.Errorf("an audited action over a log whose last line was %s: %v, want INT_002", damage, err)
			}
			if _, err := db.VerifyAuditLog(ctx); !errors.Is(err, ErrChainBroken) {
				t.Errorf("after the next audited action, verify no longer sees the %s line: %v", damage, err)
			}
		})
	}
}

// A new snapshot that fails its replay proof is removed again, audited
// first. When the removal itself does not happen (it fails, or a crash
// comes between the audit line and the remove), the file stays, and the
// audit log still vouches for it as created: the next run took it for the
// newest verified snapshot and deleted the one that proved. A snapshot the
// audit log records as removed is a leftover, not a snapshot to keep.
func TestCompactIgnoresASnapshotItsAuditRemoved(t *testing.T) {
	ctx := context.Background()
	var failRemove atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failRemove.Load() && op.Kind == errorfs.OpRemove && strings.HasSuffix(op.Path, snapshot.Ext) {
			return errorfs.ErrInjected
		}
		return nil
	}))
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1},
		KeepSnapshots: 1, RawLog: "forever", VerifyBeforeDelete: true}
	for i := 0; i < 20; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%02d", i)), []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil || res.Created == nil {
		t.Fatalf("first compaction: %+v %v", res, err)
	}
	good := res.Created.Name
	rc, err := db.Put(ctx, "a", []byte("k00"), []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get(ctx, []byte("k00")); err != nil {
		t.Fatal(err)
	}
	vk := schema.VersionKey([]byte("k00"), rc.Counter, "a")
	row, closer, err := db.index.Get(vk)
	if err != nil {
		t.Fatal(err)
	}
	ve, err := schema.DecodeVersion(row)
	closer.Close()
	if err != nil {
		t.Fatal(err)
	}
	ve.Value = []byte("bad")
	if err := db.index.Set(vk, ve.Append(nil), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	failRemove.Store(true)
	if _, err := db.Compact(ctx, policy, CompactOptions{Apply: true}); err == nil {
		t.Fatal("compaction with a snapshot that fails its replay succeeded")
	}
	failRemove.Store(false)
	list, err := db.Snapshots(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("%d snapshots (%v); want the good one and the leftover", len(list), err)
	}
	leftover := list[0].Name
	if leftover == good {
		leftover = list[1].Name
	}
	// The index is right again: whatever the next run creates proves.
	if err := db.index.Set(vk, func() []byte { ve.Value = []byte("v2"); return ve.Append(nil) }(), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	res, err = db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if list, err = db.Snapshots(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
		if _, err := db.VerifySnapshot(ctx, s.Path); err != nil {
			t.Errorf("after the next compaction (%s), snapshot %s does not prove by replay: %v", res.Plan, s.Name, err)
		}
	}
	if !slices.Contains(names, good) || slices.Contains(names, leftover) {
		t.Errorf("snapshots after the next compaction: %v; want %s kept and the leftover %s removed (plan %s)", names, good, leftover, res.Plan)
	}
}
