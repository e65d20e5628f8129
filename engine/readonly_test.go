package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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

// A read-only open (Options.ReadOnly) writes nothing, and reads what it can.

// noWriteFS refuses every call that would create, change or remove
// anything, and records each attempt: a read-only open must make none.
type noWriteFS struct {
	vfs.FS
	mu       sync.Mutex
	attempts []string
}

func (f *noWriteFS) refuse(op, name string) error {
	f.mu.Lock()
	f.attempts = append(f.attempts, op+" "+name)
	f.mu.Unlock()
	return &os.PathError{Op: op, Path: name, Err: errors.New("refused by the test: no writes")}
}

func (f *noWriteFS) tried() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.attempts)
}

func (f *noWriteFS) Create(name string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, f.refuse("create", name)
}
func (f *noWriteFS) Link(o, _ string) error { return f.refuse("link", o) }
func (f *noWriteFS) OpenReadWrite(name string, _ vfs.DiskWriteCategory, _ ...vfs.OpenOption) (vfs.File, error) {
	return nil, f.refuse("open-rw", name)
}
func (f *noWriteFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return &noWriteFile{File: file, fs: f, name: name}, nil
}
func (f *noWriteFS) OpenDir(name string) (vfs.File, error) {
	file, err := f.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &noWriteFile{File: file, fs: f, name: name}, nil
}
func (f *noWriteFS) Remove(name string) error                 { return f.refuse("remove", name) }
func (f *noWriteFS) RemoveAll(name string) error              { return f.refuse("removeall", name) }
func (f *noWriteFS) Rename(o, _ string) error                 { return f.refuse("rename", o) }
func (f *noWriteFS) MkdirAll(dir string, _ os.FileMode) error { return f.refuse("mkdir", dir) }
func (f *noWriteFS) ReuseForWrite(o, _ string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, f.refuse("reuse", o)
}
func (f *noWriteFS) Lock(name string) (io.Closer, error) { return nil, f.refuse("lock", name) }
func (f *noWriteFS) Unwrap() vfs.FS                      { return f.FS }

type noWriteFile struct {
	vfs.File
	fs   *noWriteFS
	name string
}

func (f *noWriteFile) Write([]byte) (int, error)          { return 0, f.fs.refuse("write", f.name) }
func (f *noWriteFile) WriteAt([]byte, int64) (int, error) { return 0, f.fs.refuse("write", f.name) }
func (f *noWriteFile) Sync() error                        { return f.fs.refuse("sync", f.name) }
func (f *noWriteFile) SyncData() error                    { return f.fs.refuse("sync", f.name) }
func (f *noWriteFile) SyncTo(int64) (bool, error)         { return false, f.fs.refuse("sync", f.name) }
func (f *noWriteFile) Preallocate(int64, int64) error     { return f.fs.refuse("preallocate", f.name) }

// treeListing is every entry under root with its kind, size and mtime, one
// line each: two listings are equal when nothing was created, changed or
// removed.
func treeListing(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, fmt.Sprintf("%s %s %d %d", rel, st.Mode(), st.Size(), st.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// richDatabase writes a database with every kind of file: sealed segments,
// values in segments and inline, deletes, an idempotency key, stored
// checkpoints, a truncating compaction's stubs and snapshot, an audit log.
// It returns the open database, the live state and the signer's verifier
// key.
func richDatabase(t *testing.T, fs vfs.FS, dir string) (*DB, map[string]string) {
	t.Helper()
	ctx := context.Background()
	db, err := Open(dir, Options{FS: fs, SegmentSize: 4096, InlineValueMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	put := func(i int) {
		a := fmt.Sprintf("a%d", i%3)
		k := fmt.Sprintf("k%03d", i%12) // repeated within a segment: a truncation keeps only the last
		if i%11 == 5 {
			if _, err := db.Delete(ctx, a, []byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
			return
		}
		v := fmt.Sprintf("v%d", i)
		if i%7 == 0 {
			v += strings.Repeat("L", 100)
		}
		if _, err := db.Put(ctx, a, []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	for i := 0; i < 400; i++ {
		put(i)
	}
	if _, err := db.Append(ctx, Entry{Anchor: "ev", Type: "BOOT", Value: []byte("x"), IdempotencyKey: []byte("idem-1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // a snapshot
		t.Fatal(err)
	}
	for i := 400; i < 430; i++ {
		put(i)
	}
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}) // the cut, below it
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	for i := 430; i < 440; i++ {
		put(i)
	}
	skey, _ := coverKeys(t)
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatal(err)
	}
	return db, want
}

// TestReadOnlyOpenWritesNothing opens a read-only copy — through a
// filesystem that refuses every write, create, remove, rename and lock —
// and runs every read: each works, each write is refused with ErrReadOnly,
// nothing was attempted, and a listing of the directory with sizes and
// mtimes is the same after as before.
func TestReadOnlyOpenWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	db, want := richDatabase(t, vfs.Default, dir)
	frontier, err := db.Frontier(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root, _, err := db.MergedRoot(ctx, frontier)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := treeListing(t, dir)
	nw := &noWriteFS{FS: vfs.Default}
	ro, err := Open(dir, Options{FS: nw, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.IndexUnavailable(); err != nil {
		t.Fatalf("a cleanly closed database's index is not used: %v", err)
	}
	checkState(t, ro, want)
	if got, _, err := ro.MergedRoot(ctx, frontier); err != nil || got != root {
		t.Fatalf("merged root %s, %v; want %s", got, err, root)
	}
	if _, err := ro.GetAt(ctx, []byte("k001"), frontier); err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	for _, err := range ro.History(ctx, []byte("k010")) {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, err := range ro.Merged(ctx, MergedOptions{}) {
		if CodeOf(err) == errs.CodeDependencyMissing {
			continue // records the truncation removed
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("merged view is empty")
	}
	for rec, err := range ro.Log(ctx, "a1", 140, 0) {
		if CodeOf(err) == errs.CodeDependencyMissing {
			continue // records the truncation removed
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ro.ProveInclusion(ctx, "a1", rec.Seq, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ro.ProveConsistency(ctx, "a1", 3, 0); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := ro.IdempotencyReceipt(ctx, "ev", []byte("idem-1")); err != nil || !ok || r.Seq != 1 {
		t.Fatalf("idempotency receipt %+v %v %v", r, ok, err)
	}
	_, vkey := coverKeys(t)
	rep, err := ro.Verify(ctx, VerifyOptions{VerifierKeys: []string{vkey}})
	if err != nil || !rep.OK || rep.Files != nil {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	snaps, err := ro.Snapshots(ctx)
	if err != nil || len(snaps) == 0 {
		t.Fatalf("snapshots %v %v", snaps, err)
	}
	for _, s := range snaps {
		if _, err := ro.VerifySnapshot(ctx, s.Path); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ro.VerifyAuditLog(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if cps, err := ro.Checkpoints(ctx); err != nil || len(cps) < 2 {
		t.Fatalf("checkpoints %d %v", len(cps), err)
	}
	if _, err := ro.Compact(ctx, truncatePolicy, CompactOptions{}); err != nil {
		t.Fatalf("a plan: %v", err)
	}
	export := vfs.NewMem()
	if _, err := ro.CreateSnapshotTo(ctx, export, "out", ""); err != nil {
		t.Fatalf("an export elsewhere: %v", err)
	}
	// Every write is refused.
	refused := map[string]error{}
	_, refused["put"] = ro.Put(ctx, "a1", []byte("k"), []byte("v"))
	_, refused["delete"] = ro.Delete(ctx, "a1", []byte("k"))
	_, refused["batch"] = ro.AppendBatch(ctx, []Entry{{Anchor: "n", Type: "put", Key: []byte("k")}})
	refused["sync"] = ro.Sync(ctx)
	skey, _ := coverKeys(t)
	_, _, refused["checkpoint"] = ro.CreateCheckpoint(ctx, skey)
	_, refused["snapshot"] = ro.CreateSnapshot(ctx, "")
	_, refused["compact"] = ro.Compact(ctx, truncatePolicy, CompactOptions{Apply: true})
	_, refused["ingest"] = ro.Ingest(ctx, dir, IngestOptions{})
	for what, err := range refused {
		if !errors.Is(err, ErrReadOnly) || CodeOf(err) != errs.CodeWriteFailed {
			t.Errorf("%s on a read-only open: %v, want IO_001 with ErrReadOnly", what, err)
		}
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if tried := nw.tried(); len(tried) > 0 {
		t.Fatalf("a read-only open tried to write: %q", tried)
	}
	if after := treeListing(t, dir); !slices.Equal(before, after) {
		t.Fatalf("the directory changed:\nbefore %q\nafter  %q", before, after)
	}
}

// TestReadOnlyOpenCreatesNoDatabase: a directory that holds none is
// INPUT_001, and nothing is made there.
func TestReadOnlyOpenCreatesNoDatabase(t *testing.T) {
	base := t.TempDir()
	for _, dir := range []string{filepath.Join(base, "missing"), base} {
		_, err := Open(dir, Options{FS: vfs.Default, ReadOnly: true})
		if CodeOf(err) != errs.CodeInvalidInput {
			t.Fatalf("%s: %v, want INPUT_001", dir, err)
		}
	}
	if names, _ := os.ReadDir(base); len(names) != 0 {
		t.Fatalf("a read-only open made %v", names)
	}
}

// uncleanCopy is a copy of a database taken while it was open (so its
// index says "not closed cleanly"), with appends since the last settle in
// the journal alone. It returns the copy's filesystem and path, and every
// receipt, in order.
func uncleanCopy(t *testing.T) (vfs.FS, string, []Receipt) {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, SegmentSize: 4096, SettleBytes: 1 << 40, SettleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var rs []Receipt
	for i := 0; i < 300; i++ {
		r, err := db.Put(ctx, fmt.Sprintf("a%d", i%2), []byte(fmt.Sprintf("k%d", i)), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
		if i == 150 {
			if err := db.Sync(ctx); err != nil { // a settle: the first half leaves the journal
				t.Fatal(err)
			}
		}
	}
	copyFS := vfs.NewMem()
	if err := testutil.CopyTree(fs, "db", copyFS, "db"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return copyFS, "db", rs
}

// TestReadOnlyUncleanDatabase: a copy taken while the database was open
// (its index behind the journal) is not read from its index: those reads
// are refused with STATE_003 saying what is needed; Log, Record, the proofs
// and Verify read the segments and the journal and see every acknowledged
// append, writing nothing.
func TestReadOnlyUncleanDatabase(t *testing.T) {
	ctx := context.Background()
	fs, dir, rs := uncleanCopy(t)
	nw := &noWriteFS{FS: fs}
	ro, err := Open(dir, Options{FS: nw, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	why := ro.IndexUnavailable()
	if CodeOf(why) != errs.CodeDependencyMissing || !strings.Contains(why.Error(), "not closed cleanly") {
		t.Fatalf("IndexUnavailable: %v", why)
	}
	if _, err := ro.Get(ctx, []byte("k1")); CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("get on an unclean read-only copy: %v, want STATE_003", err)
	}
	if _, err := ro.Stats(ctx); CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("stats: %v", err)
	}
	byAnchor := map[string][]Receipt{}
	for _, r := range rs {
		byAnchor[r.Anchor] = append(byAnchor[r.Anchor], r)
	}
	for anchor, want := range byAnchor {
		var got []Receipt
		for rec, err := range ro.Log(ctx, anchor, 1, 0) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, Receipt{Anchor: rec.Anchor, Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("anchor %s: the files give %d records, %d were acknowledged", anchor, len(got), len(want))
		}
		last := want[len(want)-1]
		rec, err := ro.Record(ctx, anchor, last.Seq)
		if err != nil || rec.Hash != last.Hash {
			t.Fatalf("record %d: %v", last.Seq, err)
		}
		p, err := ro.ProveInclusion(ctx, anchor, last.Seq, 0)
		if err != nil || p.Leaf != last.Hash || p.Size != last.Seq {
			t.Fatalf("inclusion %+v %v", p, err)
		}
		c, err := ro.ProveConsistency(ctx, anchor, 10, 0)
		if err != nil || c.NewRoot != p.Root {
			t.Fatalf("consistency %+v %v", c, err)
		}
	}
	rep, err := ro.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK || rep.Files == nil || rep.Records != uint64(len(rs)) {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	if tried := nw.tried(); len(tried) > 0 {
		t.Fatalf("a read-only open tried to write: %q", tried)
	}
}

// TestReadOnlyTreeMatchesTheWriters: the proofs and roots the files give
// are the index's, at every size.
func TestReadOnlyTreeMatchesTheWriters(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, SegmentSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 300; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprintf("k%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := Open("db", Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if CodeOf(ro.IndexUnavailable()) != errs.CodeScopeLocked {
		t.Fatalf("IndexUnavailable beside a writer: %v", ro.IndexUnavailable())
	}
	for _, size := range []uint64{1, 2, 3, 255, 256, 257, 300} {
		for _, seq := range []uint64{1, size / 2, size} {
			if seq == 0 {
				continue
			}
			want, err := db.ProveInclusion(ctx, "a", seq, size)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ro.ProveInclusion(ctx, "a", seq, size)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("inclusion %d@%d: %v\n got %+v\nwant %+v", seq, size, err, got, want)
			}
		}
		for _, old := range []uint64{0, 1, size / 3, size} {
			want, err := db.ProveConsistency(ctx, "a", old, size)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ro.ProveConsistency(ctx, "a", old, size)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("consistency %d..%d: %v\n got %+v\nwant %+v", old, size, err, got, want)
			}
		}
		wr, _, _ := db.AnchorRoot(ctx, "a", size)
		if gr, _, err := ro.AnchorRoot(ctx, "a", size); err != nil || gr != wr {
			t.Fatalf("root at %d: %v", size, err)
		}
	}
	if _, err := ro.ProveInclusion(ctx, "a", 1, 301); CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("a size past the files: %v", err)
	}
	if _, err := ro.ProveInclusion(ctx, "nosuch", 1, 0); CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("an unknown anchor: %v", err)
	}
	for _, err := range ro.Log(ctx, "nosuch", 1, 0) {
		if CodeOf(err) != errs.CodeDependencyMissing {
			t.Fatalf("log of an unknown anchor: %v", err)
		}
	}
}

// TestWriterWaitsForReadOnlyOpen: a read-only open holds writers off
// (STATE_001, saying a reader has it), and lets them in once closed.
func TestWriterWaitsForReadOnlyOpen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(dir, Options{FS: vfs.Default})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(dir, Options{FS: vfs.Default, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ro2, err := Open(dir, Options{FS: vfs.Default, ReadOnly: true})
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	_, err = Open(dir, Options{FS: vfs.Default})
	if CodeOf(err) != errs.CodeScopeLocked || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("a writer beside a reader: %v", err)
	}
	_ = ro.Close()
	if _, err := Open(dir, Options{FS: vfs.Default}); CodeOf(err) != errs.CodeScopeLocked {
		t.Fatalf("a writer beside the second reader: %v", err)
	}
	_ = ro2.Close()
	db, err = Open(dir, Options{FS: vfs.Default})
	if err != nil {
		t.Fatalf("a writer after the readers: %v", err)
	}
	_ = db.Close()
}

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

// TestReadOnlyOpenThroughALink: a read-only open of a database this
// process has open for writing, through another spelling of its path (a
// symbolic link), is seen as beside a writer: it must not take a shared
// lock on the writer's file, which in one process would turn the writer's
// lock into a shared one and drop it when the reader closes.
func TestReadOnlyOpenThroughALink(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "db")
	db, err := Open(dir, Options{FS: vfs.Default})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Skip(err)
	}
	ro, err := Open(link, Options{FS: vfs.Default, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if CodeOf(ro.IndexUnavailable()) != errs.CodeScopeLocked {
		t.Fatalf("a read-only open through a link beside this process's writer: %v", ro.IndexUnavailable())
	}
	_ = ro.Close()
	if _, err := Open(link, Options{FS: vfs.Default}); CodeOf(err) != errs.CodeScopeLocked {
		t.Fatalf("a second writer through a link: %v", err)
	}
}
