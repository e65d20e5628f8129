package engine

// Reads and checks from the files alone (no index), beside a live writer
// and after crashes, truncations and damage.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestFilesCheckTailIsNoFinding: in the newest segment, bytes that do not
// read as the next record (a write in flight, or what a crash left) end
// the prefix and are reported as a tail, never as a finding; the same
// bytes in a segment with a successor, or an unsealed one with a
// successor, are findings.
func TestFilesCheckTailIsNoFinding(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, SegmentSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	adir := segment.AnchorDir(fs, "db", "a")
	segs, _ := fs.List(adir)
	sort.Strings(segs)
	newest := fs.PathJoin(adir, segs[len(segs)-1])
	// Half a frame at the end of the newest segment, as a write in flight
	// leaves it, and the database marked unclean so the files are read.
	appendBytes(t, fs, newest, []byte{0, 0, 0, 90, 1, 2, 3})
	markUnclean(t, fs, "db")
	ro, err := Open("db", Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ro.Verify(ctx, VerifyOptions{})
	_ = ro.Close()
	if err != nil || !rep.OK || len(rep.Files.Tails) != 1 || rep.Files.Tails[0].Bytes != 7 || rep.Records != 100 {
		t.Fatalf("a torn newest tail: %+v %v", rep, err)
	}
	// The same bytes in the segment before it: damage.
	older := fs.PathJoin(adir, segs[len(segs)-2])
	flipByte(t, fs, older, 200)
	ro, err = Open("db", Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err = ro.Verify(ctx, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Failures) != 1 || rep.Failures[0].File != older {
		t.Fatalf("a flipped byte in a sealed segment: %+v %v", rep, err)
	}
	// A read below the damage works; one across it gets the finding.
	if _, err := ro.Record(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	var last error
	for _, err := range ro.Log(ctx, "a", 1, 0) {
		last = err
	}
	if !IsCorruption(last) {
		t.Fatalf("a log across the damage ends with %v", last)
	}
}

// TestFilesCheckPassesOverForeignJournalFrames: a journal file of an
// earlier session, whose frames recovery dropped (they no longer link to
// anything), is passed over, not reported.
func TestFilesCheckPassesOverForeignJournalFrames(t *testing.T) {
	ctx := context.Background()
	// A journal file of generation 1 holding five records of anchor "a"
	// that are not this database's "a".
	other := vfs.NewMem()
	x, err := Open("x", Options{FS: other})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := x.Put(ctx, "a", []byte("fork"), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	old := readAll(t, other, "x/journal/"+journal.FileName(1))
	_ = x.Close()

	fs := vfs.NewMem()
	for session := 0; session < 2; session++ { // past journal generation 1
		db, err := Open("db", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 8; i++ {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WriteFile(fs, "db/journal/"+journal.FileName(1), old)
	ro, err := Open("db", Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK || rep.Records != 8 {
		t.Fatalf("verify with a foreign journal file: %+v %v", rep, err)
	}
	n := 0
	for rec, err := range ro.Log(ctx, "a", 1, 0) {
		if err != nil || string(rec.Key) != "k" {
			t.Fatalf("log: %v %q", err, rec.Key)
		}
		n++
	}
	if n != 8 {
		t.Fatalf("log gave %d records", n)
	}
}

// TestFilesReadsBesideALiveWriter: while writers append to many anchors,
// seal segments (small ones), settle (so journal files are deleted under
// the reader) and compactions truncate, a read-only open beside them
// verifies, logs and proves in a loop: never a finding, every log a whole
// chain from seq 1 that only grows, every proof verifying against the
// root its log gives.
func TestFilesReadsBesideALiveWriter(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(dir, Options{FS: vfs.Default, SegmentSize: 2048, SettleBytes: 32 << 10, InlineValueMax: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	anchors := []string{"a", "b", "c/d", "e"}
	skey, _ := coverKeys(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	var wmu sync.Mutex
	for w := range anchors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := db.Put(ctx, anchors[w], []byte(fmt.Sprintf("k%d", i%40)), bytes.Repeat([]byte{'v'}, 10+i%50), WithNoSync(i%3 == 0))
				if err != nil {
					wmu.Lock()
					werr = err
					wmu.Unlock()
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, _, err := db.CreateCheckpoint(ctx, skey)
			if err == nil {
				_, err = db.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
			}
			if err != nil {
				wmu.Lock()
				werr = fmt.Errorf("compact: %w", err)
				wmu.Unlock()
				return
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		if werr != nil {
			t.Fatal(werr)
		}
		// The reads met what they were meant to meet.
		if m := db.Metrics(); m.Seals == 0 || m.Settles == 0 {
			t.Errorf("the writer sealed %d segments and settled %d times", m.Seals, m.Settles)
		}
	}()
	ro, err := Open(dir, Options{FS: vfs.Default, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if CodeOf(ro.IndexUnavailable()) != errs.CodeScopeLocked {
		t.Fatalf("beside a writer: %v", ro.IndexUnavailable())
	}
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	seen := map[string]uint64{}
	truncated := func() bool {
		stubs, _ := filepath.Glob(filepath.Join(dir, segment.AnchorsDir, "*", "*", "*.hashes"))
		return len(stubs) > 0
	}
	// The rounds go on until a compaction has truncated a log too, so the
	// reads meet stubs however fast they run.
	for round := 0; round < rounds || !truncated(); round++ {
		if round > 50*rounds {
			t.Fatal("no compaction truncated a log")
		}
		rep, err := ro.Verify(ctx, VerifyOptions{})
		if err != nil || !rep.OK {
			t.Fatalf("round %d: verify beside a writer: %+v %v", round, rep, err)
		}
		for _, a := range anchors {
			var last uint64
			var lastHash segment.Hash
			for rec, err := range ro.Log(ctx, a, 1, 0) {
				if CodeOf(err) == errs.CodeDependencyMissing {
					continue // records a truncation removed and kept no copy of
				}
				if err != nil {
					t.Fatalf("round %d: log %s: %v", round, a, err)
				}
				if rec.Seq <= last || (rec.Seq == last+1 && last > 0 && rec.PrevHash != lastHash) {
					t.Fatalf("round %d: log %s: seq %d after %d does not link", round, a, rec.Seq, last)
				}
				last, lastHash = rec.Seq, rec.Hash
			}
			p, err := ro.ProveInclusion(ctx, a, 1, 0)
			if err != nil {
				if CodeOf(err) == errs.CodeDependencyMissing {
					continue // no record yet
				}
				t.Fatalf("round %d: prove %s: %v", round, a, err)
			}
			if err := proof.VerifyInclusionProof(p); err != nil {
				t.Fatal(err)
			}
			if p.Size < seen[a] {
				t.Fatalf("round %d: anchor %s went from %d to %d records", round, a, seen[a], p.Size)
			}
			seen[a] = p.Size
			c, err := ro.ProveConsistency(ctx, a, p.Size, 0)
			if err != nil || proof.VerifyConsistencyProof(c) != nil || c.OldRoot != p.Root {
				t.Fatalf("round %d: consistency %s from %d: %+v %v", round, a, p.Size, c, err)
			}
		}
	}
}

// markUnclean leaves the closed database at dir as a crash leaves it: its
// index says it was not closed cleanly.
func markUnclean(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	db, err := Open(dir, Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	killDB(t, db)
}

func appendBytes(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	data := readAll(t, fs, path)
	testutil.WriteFile(fs, path, append(data, b...))
}

// TestFilesCheckReadsDamageAgain: what a first read of the files finds
// damaged is read again a moment later, and reported only if the second
// read finds it too: a writer that is opening rewrites a segment in place
// while it recovers.
func TestFilesCheckReadsDamageAgain(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, SegmentSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	markUnclean(t, fs, "db")
	older := fs.PathJoin(segment.AnchorDir(fs, "db", "a"), segment.FileName(1))
	good := readAll(t, fs, older)
	defer func() { testBeforeRecheck = nil }()
	for _, restore := range []bool{true, false} {
		flipByte(t, fs, older, 300)
		reread := 0
		testBeforeRecheck = func() {
			reread++
			if restore {
				testutil.WriteFile(fs, older, good) // the rewrite finished
			}
		}
		ro, err := Open("db", Options{FS: fs, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := ro.Verify(ctx, VerifyOptions{})
		_ = ro.Close()
		if err != nil || reread != 1 {
			t.Fatalf("restore=%v: %v, read again %d times", restore, err, reread)
		}
		if restore && !rep.OK {
			t.Fatalf("damage gone by the second read was reported: %+v", rep.Failures)
		}
		if !restore && (rep.OK || len(rep.Failures) != 1) {
			t.Fatalf("damage both reads found: %+v", rep)
		}
		testutil.WriteFile(fs, older, good)
	}
}

// TestFilesLogAfterTruncation: read from the files, a log truncated by a
// compaction gives the records its stubs kept and one STATE_003 per run of
// records gone, at the seqs where Record says the same; the proofs cover
// the removed records too (their hashes are in the stubs).
func TestFilesLogAfterTruncation(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := richDatabase(t, fs, "db")
	defer db.Close()
	ro, err := Open("db", Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if CodeOf(ro.IndexUnavailable()) != errs.CodeScopeLocked {
		t.Fatalf("beside the writer: %v", ro.IndexUnavailable())
	}
	sawKept, sawGone := false, false
	for _, a := range []string{"a0", "a1", "a2"} {
		want := map[uint64]bool{} // seq: readable
		info, _, err := db.AnchorInfo(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= info.Records; seq++ {
			_, err := db.Record(ctx, a, seq)
			switch CodeOf(err) {
			case "":
				want[seq] = true
			case errs.CodeDependencyMissing:
			default:
				t.Fatal(err)
			}
		}
		first, err := db.firstPresent(a)
		if err != nil {
			t.Fatal(err)
		}
		var next uint64 = 1
		for rec, err := range ro.Log(ctx, a, 1, 0) {
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Code != errs.CodeDependencyMissing || e.Seq != next || want[next] {
					t.Fatalf("%s: at seq %d: %v", a, next, err)
				}
				for !want[next] && next <= info.Records {
					next++
				}
				sawGone = true
				continue
			}
			if rec.Seq != next || !want[rec.Seq] {
				t.Fatalf("%s: record %d where %d was due", a, rec.Seq, next)
			}
			if rec.Seq < first {
				sawKept = true // a copy a stub kept
			}
			next++
		}
		if next != info.Records+1 {
			t.Fatalf("%s: the log ended at %d of %d", a, next-1, info.Records)
		}
		for _, seq := range []uint64{1, info.Records / 2, info.Records} {
			want, err := db.ProveInclusion(ctx, a, seq, 0)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ro.ProveInclusion(ctx, a, seq, 0)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: inclusion of %d: %v", a, seq, err)
			}
		}
	}
	if !sawKept || !sawGone {
		t.Fatalf("the fixture kept records %v, removed some %v", sawKept, sawGone)
	}
}

// TestFilesCheckpointBeyondTheFilesIsAFinding: a stored checkpoint lists
// records the files must hold (they were durable before its note was
// written); when the newest segment has lost some, with nothing of them
// in the journal, it is a finding even though the lost bytes are at the
// tail, which alone would be no finding.
func TestFilesCheckpointBeyondTheFilesIsAFinding(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := richDatabase(t, fs, "db")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	markUnclean(t, fs, "db")
	adir := segment.AnchorDir(fs, "db", "a1")
	names, _ := fs.List(adir)
	sort.Strings(names)
	newest := fs.PathJoin(adir, names[len(names)-1])
	data := readAll(t, fs, newest)
	testutil.WriteFile(fs, newest, data[:len(data)-40]) // the last record cut short
	ro, err := Open("db", Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, vkey := coverKeys(t)
	rep, err := ro.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
	if err != nil || rep.OK || rep.Files == nil || len(rep.Files.Tails) != 1 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	for _, f := range rep.Failures {
		if f.Anchor != "a1" || f.Code != errs.CodeChainBroken || !strings.Contains(f.Message, "checkpoint lists") {
			t.Fatalf("finding %+v", f)
		}
	}
}
