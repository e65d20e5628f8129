package engine

import (
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
	"github.com/anchordb/anchordb/internal/testutil"
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
