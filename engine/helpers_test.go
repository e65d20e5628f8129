package engine

// Helpers shared by the engine's test files. Helpers that need no engine
// internals live in internal/testutil; these use unexported fields or
// functions of the package, so they stay in it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// segmentAnchorDir is segment.AnchorDir.
func segmentAnchorDir(fs vfs.FS, dir, anchor string) string {
	return segment.AnchorDir(fs, dir, anchor)
}

// segmentFileName is segment.FileName.
func segmentFileName(segno uint64) string { return segment.FileName(segno) }

// appendVisible appends e and returns its receipt and its anchor's head once
// the append is applied: heads are the applier's, and an append is
// acknowledged before it is applied. The receipt is zero if the append
// failed, set if only the wait did.
func appendVisible(ctx context.Context, db *DB, e Entry) (Receipt, anchorHead, error) {
	r, err := db.Append(ctx, e)
	if err != nil {
		return Receipt{}, anchorHead{}, err
	}
	if err := db.commit.awaitVisible(ctx); err != nil {
		return r, anchorHead{}, err
	}
	db.anchorsMu.RLock()
	a := db.anchors[e.Anchor]
	db.anchorsMu.RUnlock()
	return r, a.snapshot(), nil
}

// fillAnchor puts n keys fill-<tag>-0000, fill-<tag>-0001, … to anchor,
// each with the same 38-byte value: a few hundred of them seal several
// segments of 4 KiB.
func fillAnchor(t *testing.T, db *DB, anchor string, n int, tag string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if _, err := db.Put(ctx, anchor, []byte(fmt.Sprintf("fill-%s-%04d", tag, i)), []byte("some filler value of a few dozen bytes")); err != nil {
			t.Fatal(err)
		}
	}
}

// mustReadFile returns the whole content of path in fs.
func mustReadFile(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	b, err := readWhole(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustWriteFile replaces path in fs with b and syncs the file (not its
// directory).
func mustWriteFile(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err == nil {
		// A copy: Pebble's MemFS, built with invariants (as under -race),
		// mangles the buffer a Write was given, and callers compare with b.
		_, err = f.Write(slices.Clone(b))
		err = errors.Join(err, f.Sync(), f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
}

// rebuildFromSnapshot runs rebuild-index --from-snapshot on the closed
// database "db" and returns the kinds of event its report holds.
func rebuildFromSnapshot(t *testing.T, opts Options) map[string]bool {
	t.Helper()
	plan, err := RebuildIndexWith(context.Background(), "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, ev := range plan.Report.Events {
		kinds[ev.Kind] = true
	}
	return kinds
}

// killDB abandons db as a SIGKILL would: nothing is flushed or synced; the
// lock and the index (no WAL: its memtable is dropped) are released so the
// same MemFS can be opened again. Bytes written to files stay, unsynced.
func killDB(t *testing.T, db *DB) {
	t.Helper()
	db.fail(errors.New("simulated kill"))
	if err := db.index.Close(); err != nil {
		t.Logf("close the killed database's index: %v", err)
	}
	_ = db.lock.Close()
}

// openHookFS calls hook (once armed) on every Open of a path containing
// match.
type openHookFS struct {
	vfs.FS
	match string
	armed atomic.Bool
	hook  func()
}

func (fs *openHookFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if fs.armed.Load() && strings.Contains(name, fs.match) {
		fs.armed.Store(false)
		fs.hook()
	}
	return fs.FS.Open(name, opts...)
}

// codeTextRE matches the "CODE reason" a coded error prints before its
// message. A finding carries its code and reason in fields of their own
// (CONTRACT §10), so its message must not repeat one.
var codeTextRE = regexp.MustCompile(`\b[A-Z]+_[0-9]{3} [a-z_]+\b`)

// checkFindingMessages fails the test for a finding whose message holds a
// code's text.
func checkFindingMessages(t *testing.T, rep VerifyReport) {
	t.Helper()
	for _, f := range rep.Failures {
		if m := codeTextRE.FindString(f.Message); m != "" {
			t.Errorf("finding %s at %s offset %d: the message repeats the code text %q: %q", f.Code, f.File, f.Offset, m, f.Message)
		}
	}
}

// putsUnderCheckpoints makes n puts to anchor "a" (keys k0, k1, …), each
// followed by a checkpoint signed with a new key, and returns the key's
// verifier.
func putsUnderCheckpoints(t *testing.T, db *DB, n int) string {
	t.Helper()
	ctx := context.Background()
	skey, vkey, err := proof.GenerateKeys("k")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
			t.Fatal(err)
		}
	}
	return vkey
}

// forgeSnapshot writes into dir a well-formed snapshot with s's frontier and
// entries, the value of key changed to "FORGED", created at created: what
// anybody who can write the snapshots directory can make, since the file's
// hashes are unkeyed. s stays.
func forgeSnapshot(t *testing.T, fs vfs.FS, dir string, s snapshot.Info, key []byte, created time.Time) snapshot.Info {
	t.Helper()
	r, err := snapshot.Open(fs, s.Path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []snapshot.Entry
	changed := false
	for e, err := range r.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		e = e.Clone()
		if bytes.Equal(e.Key, key) {
			e.Value, changed = []byte("FORGED"), true
		}
		entries = append(entries, e)
	}
	_ = r.Close()
	if !changed {
		t.Fatalf("snapshot %s has no key %q", s.Name, key)
	}
	forged, err := snapshot.Create(fs, dir, snapshot.Meta{Frontier: s.Frontier, PolicyRef: s.PolicyRef, Created: created},
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
	return forged
}

// rebuildEvents returns the report's events of kind.
func rebuildEvents(rep RecoveryReport, kind string) []RecoveryEvent {
	var out []RecoveryEvent
	for _, ev := range rep.Events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// truncatedFixture is an open database whose three anchors were truncated
// by compaction (raw_log "truncate"), so that their oldest segments are
// stubs, with idempotency keys and kept versions among the removed records.
func truncatedFixture(t *testing.T) *DB {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, fixtureOptions(fs))
	t.Cleanup(func() { _ = db.Close() })
	put := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			e := Entry{Anchor: fmt.Sprintf("a%d", i%3), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%03d", i%50)), Value: []byte(fmt.Sprintf("v%d", i))}
			if i%5 == 0 {
				e.IdempotencyKey = []byte(fmt.Sprint("op-", i))
			}
			if _, err := db.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 400)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	put(400, 430)
	if res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("fixture does not verify: %+v %v", rep, err)
	}
	return db
}

// otherBase64 returns a base64 character other than c, so that a signature
// changed with it still decodes, to other bytes.
func otherBase64(c byte) byte {
	if c == 'A' {
		return 'B'
	}
	return 'A'
}

// forgeAnchor writes the anchor's log in the database directory dir as one
// unsealed segment holding recs, chained and hashed as a writer would: every
// hash and link verifies, whatever the records say. It replaces the anchor's
// segments. This is what a hostile (or broken) source can hand to Ingest: no
// key is needed to produce a log whose hashes check.
func forgeAnchor(t *testing.T, fs vfs.FS, dir, anchor string, recs []segment.Record) {
	t.Helper()
	d := segmentAnchorDir(fs, dir, anchor)
	if err := fs.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.List(d)
	for _, n := range names {
		if _, ok := segment.ParseFileName(n); ok {
			if err := fs.Remove(fs.PathJoin(d, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := segment.Header{Anchor: anchor, Segno: 1, FirstSeq: 1, PrevHash: segment.GenesisHash(anchor)}
	buf := segment.AppendHeader(nil, &h)
	prev := h.PrevHash
	for i := range recs {
		r := recs[i]
		r.Anchor, r.Seq, r.PrevHash = anchor, uint64(i+1), prev
		buf = segment.AppendFrame(buf, &r)
		prev = r.Hash
	}
	f, err := fs.Create(fs.PathJoin(d, segment.FileName(1)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(buf); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// forgedPuts returns n put records with the given counters (seq, links and
// hashes are set by forgeAnchor).
func forgedPuts(counters ...uint64) []segment.Record {
	recs := make([]segment.Record, len(counters))
	for i, c := range counters {
		recs[i] = segment.Record{Counter: c, Time: int64(i + 1), Type: segment.TypePut,
			Key: []byte(fmt.Sprintf("f%d", i)), Value: []byte("forged")}
	}
	return recs
}

// heldRecords sums the records of every anchor of db.
func heldRecords(t *testing.T, db *DB) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for info, err := range db.Anchors(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		m[info.ID] = info.Records
	}
	return m
}
