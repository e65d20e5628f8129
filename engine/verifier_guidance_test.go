package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// These tests hold docs/FORMAT.md §4.9, what a verifier of the segments can
// and cannot know, to the engine.

// A torn-looking tail of a cleanly closed database is damage, not a crash's
// tail: a clean Open leaves it, verify reports INT_002 "after the last
// record", and rebuild-index --apply cuts it into lost+found.
func TestTornLookingTailAfterACleanClose(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	for i := 0; i < 3; i++ {
		if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	seg := fs.PathJoin(segmentAnchorDir(fs, "db", "a"), segment.FileName(1))
	f, err := fs.OpenReadWrite(seg, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	size := st.Size()
	if _, err := f.WriteAt([]byte{0, 0, 1}, size); err != nil { // less than a frame's length
		t.Fatal(err)
	}
	_ = f.Close()
	db = mustOpen(t, fs, memOpts(fs))
	if st, _ := fs.Stat(seg); st.Size() != size+3 {
		t.Fatalf("a clean Open changed the segment: %d bytes, was %d", st.Size(), size+3)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Failures {
		found = found || (f.Code == errs.CodeChainBroken && f.Anchor == "a" && f.Seq == 4 && strings.Contains(f.Message, "after the last record"))
	}
	if rep.OK || !found {
		t.Fatalf("verify of a torn-looking tail after a clean close: %+v", rep.Failures)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := RebuildIndex(ctx, "db", memOpts(fs), true); err != nil {
		t.Fatal(err)
	}
	if st, _ := fs.Stat(seg); st.Size() != size {
		t.Fatalf("rebuild-index left the tail: %d bytes, want %d", st.Size(), size)
	}
	if names, _ := fs.List(fs.PathJoin("db", LostAndFound)); len(names) != 1 {
		t.Fatalf("lost+found after the rebuild: %v", names)
	}
}

// A deleted tail verifies on its own: with the index rebuilt from the
// segments and no checkpoint it is not seen; a stored checkpoint that
// lists the longer log finds it.
func TestDeletedTailShowsOnlyAgainstACheckpoint(t *testing.T) {
	ctx := context.Background()
	for _, withCheckpoint := range []bool{false, true} {
		fs := vfs.NewMem()
		db := mustOpen(t, fs, memOpts(fs))
		var ends []int64
		seg := fs.PathJoin(segmentAnchorDir(fs, "db", "a"), segment.FileName(1))
		for i := 0; i < 3; i++ {
			if _, err := db.Put(ctx, "a", []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := db.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := fs.Stat(seg)
			if err != nil {
				t.Fatal(err)
			}
			ends = append(ends, st.Size())
		}
		if withCheckpoint {
			skey, _ := coverKeys(t)
			if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		// The last record goes, at a frame boundary, and the index with it.
		f, err := fs.Open(seg)
		if err != nil {
			t.Fatal(err)
		}
		keep := make([]byte, ends[1])
		if _, err := f.ReadAt(keep, 0); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		w, err := fs.Create(seg, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(keep); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		if err := fs.RemoveAll(fs.PathJoin("db", IndexDir)); err != nil {
			t.Fatal(err)
		}
		db = mustOpen(t, fs, memOpts(fs))
		rep, err := db.Verify(ctx, VerifyOptions{})
		_ = db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK == withCheckpoint {
			t.Errorf("a deleted tail, checkpoint %v: verify ok=%v %+v", withCheckpoint, rep.OK, rep.Failures)
		}
	}
}

// verify --json's records counts the records read whole from segments:
// after a truncation, fewer than the logs hold.
func TestVerifyRecordsCountsFramesRead(t *testing.T) {
	ctx := context.Background()
	db, _, size, _ := truncatedDB(t)
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	var inSegments uint64
	for _, a := range []string{"a", "b"} {
		first, err := db.firstPresent(a)
		if err != nil {
			t.Fatal(err)
		}
		info, _, err := db.AnchorInfo(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		inSegments += info.Records - (first - 1)
	}
	if rep.Records != inSegments || rep.Records >= size {
		t.Fatalf("verify counted %d records; the segments hold %d, the logs %d", rep.Records, inSegments, size)
	}
}
