package engine

// Reads that run across a truncation (stop 18's second review): they
// reported INT_002, a broken chain, on a healthy database.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func fillOutOfLine(t *testing.T, db *DB, anchor string, n int) {
	t.Helper()
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), 200) // above InlineValueMax: read from the segment
	for i := 0; i < n; i++ {
		if _, err := db.Put(ctx, anchor, []byte(fmt.Sprintf("key-%04d", i)), val); err != nil {
			t.Fatal(err)
		}
	}
}

// A Scan that runs across a truncation of the segments its versions live
// in goes on: the row it read names a removed segment, and the read then
// finds the record kept (the key's last version there) by the truncation.
func TestScanAcrossATruncation(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 200)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	n := 0
	compacted := false
	for v, err := range db.Scan(ctx, []byte("key-")) {
		if err != nil {
			t.Fatalf("Scan after %d keys, across a compaction: %v (code %s); a healthy database reported as damaged", n, err, CodeOf(err))
		}
		_ = v
		n++
		if !compacted {
			compacted = true
			res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("compact: %v %s", err, res.Plan)
			}
		}
	}
	if n != 200 {
		t.Fatalf("scan returned %d keys, want 200", n)
	}
}

// Merged across a truncation: the records it had not read yet are gone, so
// it cannot go on, and says so with STATE_003 — not INT_002, and not by
// leaving records out.
func TestMergedAcrossATruncation(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{SegmentSize: 4096, InlineValueMax: 64})
	defer db.Close()
	fillOutOfLine(t, db, "a", 600)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil { // S1
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	var prev uint64
	compacted := false
	count := 0
	for p, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			if !errors.Is(err, ErrDependencyMissing) {
				t.Fatalf("Merged across a compaction failed after seq %d with %v; want STATE_003", prev, err)
			}
			return
		}
		if p.Record.Seq != prev+1 {
			t.Fatalf("Merged across a compaction jumped from seq %d to seq %d (pos %d) without an error: %d records silently left out",
				prev, p.Record.Seq, p.Pos, p.Record.Seq-prev-1)
		}
		prev = p.Record.Seq
		count++
		if !compacted {
			compacted = true
			res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
			if err != nil || res.RemovedBytes == 0 {
				t.Fatalf("compact: %v %s", err, res.Plan)
			}
		}
	}
	if count != 601 {
		t.Fatalf("Merged gave %d records, want 601", count)
	}
}
