package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Damage inside the segments: records spliced between anchors and
// positions, torn sealed segments, segment sizes at the sealing boundary and
// a power loss right after a seal.

// closedDB builds a database with a few anchors over several sealed
// segments, closes it cleanly and returns its filesystem and receipts.
func closedDB(t *testing.T, fs vfs.FS, anchors []string, perAnchor int) []ackedEntry {
	t.Helper()
	ctx := context.Background()
	db := mustOpen(t, fs, Options{SegmentSize: 4096})
	acks := &ackLog{}
	for i := 0; i < perAnchor; i++ {
		for _, an := range anchors {
			// Equal-sized frames, so a frame can be swapped for another.
			e := Entry{Anchor: an, Type: segment.TypePut, Key: []byte(fmt.Sprintf("key-%03d", i)), Value: bytes.Repeat([]byte{'v'}, 300), Counter: uint64(1000 + i)}
			r, err := db.Append(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			acks.add(e, r)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return acks.snapshot()
}

// frames returns each frame of a segment file with its offset and bytes.
func frames(t testing.TB, fs vfs.FS, path string) (hdr segment.Header, offs []int64, bufs [][]byte) {
	t.Helper()
	data, err := testutil.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := segment.NewScanner(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for {
		fr, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		offs = append(offs, fr.Offset)
		bufs = append(bufs, slices.Clone(data[fr.Offset:fr.Offset+int64(fr.Size)]))
	}
	return sc.Header, offs, bufs
}

// scanError scans a segment file and returns the first error.
func scanError(fs vfs.FS, path string) error {
	data, err := testutil.ReadFile(fs, path)
	if err != nil {
		return err
	}
	sc, err := segment.NewScanner(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return err
	}
	for {
		if _, err := sc.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func frameCode(err error) Code {
	var fe *segment.FrameError
	if errors.As(err, &fe) {
		return fe.AsError("", "").Code
	}
	return CodeOf(err)
}

func patchFile(t testing.TB, fs vfs.FS, path string, fn func([]byte) []byte) {
	t.Helper()
	data, err := testutil.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(fs, path, fn(slices.Clone(data)))
}

func TestSplicedFrames(t *testing.T) {
	ctx := context.Background()
	anchors := []string{"splice-a", "splice-b"}

	t.Run("frame of another anchor", func(t *testing.T) {
		mem := vfs.NewMem()
		acked := closedDB(t, mem, anchors, 30)
		aSegs := testutil.SegmentFiles(t, mem, "db", "splice-a")
		bSegs := testutil.SegmentFiles(t, mem, "db", "splice-b")
		_, _, aFrames := frames(t, mem, aSegs[0])
		_, bOffs, bFrames := frames(t, mem, bSegs[0])
		// A's frame 3 over B's frame 3 (the same size and seq): its hash
		// binds it to A.
		patchFile(t, mem, bSegs[0], func(b []byte) []byte {
			copy(b[bOffs[2]:], aFrames[2])
			return b
		})
		if len(aFrames[2]) != len(bFrames[2]) {
			t.Fatalf("frames differ in size: %d, %d", len(aFrames[2]), len(bFrames[2]))
		}
		err := scanError(mem, bSegs[0])
		if c := frameCode(err); c != "INT_001" && c != "INT_002" {
			t.Fatalf("scanning B with A's frame spliced in: want INT_001/INT_002, got %v", err)
		}
		// Reading it through the engine must not serve A's record as B's.
		db := mustOpen(t, mem, Options{SegmentSize: 4096})
		defer db.Close()
		rec, err := db.Record(ctx, "splice-b", 3)
		if !IsCorruption(err) {
			t.Fatalf("record B/3 over a spliced frame: want an INT_* error, got %+v %v", rec, err)
		}
		for _, a := range acked {
			if a.Receipt.Anchor == "splice-a" {
				if rec, err := db.Record(ctx, "splice-a", a.Seq); err != nil || rec.Hash != a.Hash {
					t.Fatalf("A's records must be untouched: seq %d: %v", a.Seq, err)
				}
			}
		}
	})

	t.Run("frame of another position", func(t *testing.T) {
		mem := vfs.NewMem()
		closedDB(t, mem, anchors, 30)
		aSegs := testutil.SegmentFiles(t, mem, "db", "splice-a")
		_, offs, fr := frames(t, mem, aSegs[0])
		// Frame 2 copied over frame 4 of the same anchor: a valid record
		// with its hash intact, in the wrong place.
		patchFile(t, mem, aSegs[0], func(b []byte) []byte {
			copy(b[offs[3]:], fr[1])
			return b
		})
		err := scanError(mem, aSegs[0])
		if c := frameCode(err); c != "INT_002" && c != "INT_001" {
			t.Fatalf("scanning A with frame 2 at position 4: want INT_002, got %v", err)
		}
		db := mustOpen(t, mem, Options{SegmentSize: 4096})
		defer db.Close()
		rec, err := db.Record(ctx, "splice-a", 4)
		if !IsCorruption(err) {
			t.Fatalf("record A/4 holding A/2's frame: want an INT_* error, got seq %d %v", rec.Seq, err)
		}
	})

	t.Run("frame of another anchor at the tail, unclean shutdown", func(t *testing.T) {
		mem := vfs.NewCrashableMem()
		closedDB(t, mem, anchors, 30)
		db := mustOpen(t, mem, Options{SegmentSize: 4096})
		if _, err := db.Put(ctx, "splice-b", []byte("x"), []byte("y")); err != nil {
			t.Fatal(err)
		}
		// Everything written and settled, but the database still open: the
		// next open is unclean and looks at the tails.
		if err := db.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: newRand(1)})
		_ = db.Close()
		bSegs := testutil.SegmentFiles(t, crashed, "db", "splice-b")
		aSegs := testutil.SegmentFiles(t, crashed, "db", "splice-a")
		_, _, aFrames := frames(t, crashed, aSegs[len(aSegs)-1])
		_, _, bf0 := frames(t, crashed, bSegs[len(bSegs)-1])
		before := uint64(len(bf0))
		// A whole frame of A appended to B's newest segment, as if written
		// there by mistake: it must never be adopted as B's.
		patchFile(t, crashed, bSegs[len(bSegs)-1], func(b []byte) []byte { return append(b, aFrames[len(aFrames)-1]...) })
		if c := frameCode(scanError(crashed, bSegs[len(bSegs)-1])); c != "INT_001" && c != "INT_002" {
			t.Fatalf("scanner over B with A's frame at the tail: want INT_001/INT_002, got %s", c)
		}
		db = mustOpen(t, crashed, Options{SegmentSize: 4096})
		defer db.Close()
		info, _, err := db.AnchorInfo(context.Background(), "splice-b")
		if err != nil {
			t.Fatal(err)
		}
		_, _, bf := frames(t, crashed, bSegs[len(bSegs)-1])
		if uint64(len(bf)) != before {
			t.Errorf("B's newest segment holds %d frames after recovery, %d before the splice", len(bf), before)
		}
		reported := false
		for _, ev := range db.RecoveryReport().Events {
			if ev.Anchor == "splice-b" && (ev.Kind == EventCut || ev.Kind == EventDamaged) {
				reported = true
			}
		}
		if !reported {
			t.Errorf("the spliced frame was not reported: %v (B has %d records)", db.RecoveryReport().Events, info.Records)
		}
	})
}

// uncleanWithSealed leaves an unclean database (a process crash: everything
// written is there) whose anchor "torn" has four or more segments. With
// settled, a Sync made the first segments and the index durable before more
// appends, so the journal no longer covers them; without, the journal holds
// every record since the start.
func uncleanWithSealed(t *testing.T, settled bool) (*vfs.MemFS, []ackedEntry) {
	t.Helper()
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, Options{SegmentSize: 4096, SettleBytes: 1 << 30, SettleInterval: time.Hour})
	acks := &ackLog{}
	for i := 0; i < 48; i++ {
		for _, an := range []string{"torn", "other"} {
			e := Entry{Anchor: an, Type: segment.TypePut, Key: []byte(fmt.Sprintf("%s-%d", an, i)), Value: bytes.Repeat([]byte{'v'}, 300)}
			r, err := db.Append(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			acks.add(e, r)
		}
		if settled && i == 30 {
			if err := db.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The segments must hold what the journal does: wait for the applier,
	// which writes them behind the acknowledgements.
	if err := db.commit.awaitVisible(ctx); err != nil {
		t.Fatal(err)
	}
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: newRand(3)})
	_ = db.Close()
	return crashed, acks.snapshot()
}

// TestTornSealedSegment: a sealed segment is fsynced when sealed and never
// written again, so a crash cannot tear it. Its tail missing after an
// unclean shutdown is damage — reported, the anchor read-only, its intact
// records readable, nothing cut — unless the journal still holds the records
// and the seal, which then restore it.
func TestTornSealedSegment(t *testing.T) {
	ctx := context.Background()
	t.Run("settled", func(t *testing.T) {
		mem, acked := uncleanWithSealed(t, true)
		segs := testutil.SegmentFiles(t, mem, "db", "torn")
		if len(segs) < 4 {
			t.Fatalf("anchor has %d segments, want 4 or more", len(segs))
		}
		// Cut a few bytes off the first (sealed, settled) segment: its seal
		// is torn.
		_, offs, _ := frames(t, mem, segs[0])
		full, _ := testutil.ReadFile(mem, segs[0])
		patchFile(t, mem, segs[0], func(b []byte) []byte { return b[:len(b)-5] })
		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer db.Close()
		var damage *RecoveryEvent
		for _, ev := range db.RecoveryReport().Events {
			if ev.Anchor == "torn" && ev.Kind == EventCut {
				t.Errorf("a torn sealed segment was cut like a torn tail: %v", ev)
			}
			if ev.Anchor == "torn" && ev.Kind == EventDamaged {
				damage = &ev
			}
		}
		info, _, err := db.AnchorInfo(context.Background(), "torn")
		if err != nil {
			t.Fatal(err)
		}
		if damage == nil || damage.Err == nil || !IsCorruption(damage.Err) || info.Damage == "" {
			t.Errorf("the torn seal of sealed segment 1 (of %d) was not reported after an unclean shutdown: events %v, anchor damage %q",
				len(segs), db.RecoveryReport().Events, info.Damage)
		}
		// The anchor is read-only …
		if _, err := db.Put(ctx, "torn", []byte("k"), []byte("v")); !IsCorruption(err) {
			t.Errorf("write to the anchor with a torn sealed segment: want an INT_* refusal, got %v", err)
		}
		// … nothing was cut or rewritten …
		if data, _ := testutil.ReadFile(mem, segs[0]); !bytes.Equal(data, full[:len(full)-5]) {
			t.Errorf("the damaged segment was changed: %d bytes, was %d", len(data), len(full)-5)
		}
		// … its intact records still read …
		for _, a := range acked {
			if a.Receipt.Anchor == "torn" && a.Seq <= uint64(len(offs)) {
				rec, err := db.Record(ctx, "torn", a.Seq)
				if err != nil || rec.Hash != a.Hash {
					t.Fatalf("intact record torn/%d of the damaged anchor: %v", a.Seq, err)
				}
			}
		}
		// … and the other anchor is untouched and writable.
		for _, a := range acked {
			if a.Receipt.Anchor == "other" {
				if rec, err := db.Record(ctx, "other", a.Seq); err != nil || rec.Hash != a.Hash {
					t.Fatalf("other/%d: %v", a.Seq, err)
				}
			}
		}
		if _, err := db.Put(ctx, "other", []byte("k"), []byte("v")); err != nil {
			t.Fatalf("write to an undamaged anchor: %v", err)
		}
	})
	t.Run("within the journal", func(t *testing.T) {
		mem, acked := uncleanWithSealed(t, false)
		segs := testutil.SegmentFiles(t, mem, "db", "torn")
		patchFile(t, mem, segs[0], func(b []byte) []byte { return b[:len(b)-5] })
		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer db.Close()
		restored := false
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == EventRestored && ev.File == segs[0] {
				restored = true
			}
		}
		if !restored {
			t.Errorf("the journal holds the seal of %s but recovery did not restore it: %v", segs[0], db.RecoveryReport().Events)
		}
		checkDB(t, db, acked)
	})
}

// sealingFrame finds an anchor id and a value length such that exactly n
// records of equal frames fill a segment of segSize: header + n·frame ==
// segSize.
func sealingFrame(t *testing.T, prefix string, n int, segSize int64) (anchorLen, valueLen, frame int) {
	t.Helper()
	for pad := 0; pad < n; pad++ {
		an := prefix + strings.Repeat("x", pad)
		h := segment.HeaderSize(an)
		if (int(segSize)-h)%n != 0 {
			continue
		}
		frame = (int(segSize) - h) / n
		empty := segment.Record{Anchor: an, Type: segment.TypePut, Key: []byte("key-00")}
		valueLen = frame - empty.FrameSize()
		if valueLen < 0 {
			t.Fatalf("segment of %d too small for %d records", segSize, n)
		}
		return len(an), valueLen, frame
	}
	t.Fatalf("no anchor length makes %d records fill %d bytes", n, segSize)
	return
}

func TestSealingBoundary(t *testing.T) {
	ctx := context.Background()
	const segSize = 4096
	const n = 8
	anLen, valLen, frameSize := sealingFrame(t, "seal-", n, segSize)
	mk := func(tag byte) string { return "seal" + string(tag) + strings.Repeat("x", anLen-5) }
	counts := map[string]int{mk('a'): n - 1, mk('b'): n, mk('c'): n + 1}
	entry := func(an string, i int) Entry {
		return Entry{Anchor: an, Type: segment.TypePut, Key: []byte(fmt.Sprintf("key-%02d", i%100)), Value: bytes.Repeat([]byte{byte('a' + i%26)}, valLen)}
	}
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			opts := Options{SegmentSize: segSize}
			db := mustOpen(t, mem, opts)
			acks := &ackLog{}
			// Settle first, so the anchors' directories are durable and only
			// the boundary is under test here (see TestCrashAfterSeal).
			for an := range counts {
				e := entry(an, 0)
				r, err := db.Append(ctx, e)
				if err != nil {
					t.Fatal(err)
				}
				acks.add(e, r)
			}
			if err := db.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			for an, c := range counts {
				for i := 1; i < c; i++ {
					e := entry(an, i)
					r, err := db.Append(ctx, e)
					if err != nil {
						t.Fatal(err)
					}
					if rec := (segment.Record{Anchor: an, Type: e.Type, Key: e.Key, Value: e.Value}); rec.FrameSize() != frameSize {
						t.Fatalf("frame of %d bytes, want %d", rec.FrameSize(), frameSize)
					}
					acks.add(e, r)
				}
			}
			reopen := func() {
				t.Helper()
				if crash {
					next := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
					_ = db.Close()
					mem = next
				} else if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = mustOpen(t, mem, opts)
				checkDB(t, db, acks.snapshot())
				for _, ev := range db.RecoveryReport().Events {
					if ev.Kind == EventDamaged || ev.Kind == EventCut {
						t.Fatalf("recovery at the sealing boundary: %v", ev)
					}
				}
			}
			reopen()
			check := func(extra int) {
				t.Helper()
				for an, c := range counts {
					c += extra
					segs := testutil.SegmentFiles(t, mem, "db", an)
					wantSegs := (c + n - 1) / n
					if len(segs) != wantSegs {
						t.Fatalf("%d records of %s: %d segments, want %d", c, an, len(segs), wantSegs)
					}
					for i, p := range segs {
						_, offs, _ := frames(t, mem, p)
						want := n
						if i == len(segs)-1 {
							want = c - n*(len(segs)-1)
						}
						if len(offs) != want {
							t.Fatalf("%s segment %d holds %d records, want %d", an, i+1, len(offs), want)
						}
						st, _ := mem.Stat(p)
						size := int64(segment.HeaderSize(an) + want*frameSize)
						if i < len(segs)-1 {
							size += segment.FooterSize
						}
						if st.Size() != size {
							t.Fatalf("%s segment %d is %d bytes, want %d", an, i+1, st.Size(), size)
						}
					}
					info, _, _ := db.AnchorInfo(context.Background(), an)
					if info.Records != uint64(c) {
						t.Fatalf("%s: %d records, want %d", an, info.Records, c)
					}
				}
			}
			check(0)
			// One more each, across the boundary after the reopen, then again.
			for extra := 1; extra <= 2; extra++ {
				for an, c := range counts {
					e := entry(an, c+extra-1)
					r, err := db.Append(ctx, e)
					if err != nil {
						t.Fatal(err)
					}
					acks.add(e, r)
				}
				reopen()
				check(extra)
			}
			_ = db.Close()
		})
	}
}

// TestCrashAfterSeal: a power loss right after an append that sealed a
// segment of an anchor created since the last settle. Every append was
// acknowledged, so all must survive, and nothing is damaged.
func TestCrashAfterSeal(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	opts := Options{SegmentSize: 4096, SettleBytes: 1 << 30, SettleInterval: time.Hour}
	db := mustOpen(t, mem, opts)
	acks := &ackLog{}
	for i, n := range []int{10, 5000} { // the second does not fit: seal
		e := Entry{Anchor: "sealed-then-crashed", Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i)), Value: bytes.Repeat([]byte{'v'}, n)}
		r, err := db.Append(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		acks.add(e, r)
	}
	crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	_ = db.Close()
	db = mustOpen(t, crashed, opts)
	defer db.Close()
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventDamaged {
			t.Errorf("recovery reports damage after a power loss: %v", ev)
		}
	}
	checkDB(t, db, acks.snapshot())
}

// TestTornNewestSegmentOfDamagedAnchor: recovery removes a newest segment
// whose creation a crash tore (it holds no record) — but not when the same
// recovery, or an earlier one, finds the anchor damaged: a damaged anchor's
// files are left exactly as they are for an operator (SPEC §3), on this
// open and on every later one.
func TestTornNewestSegmentOfDamagedAnchor(t *testing.T) {
	mem, _ := uncleanWithSealed(t, true)
	segs := testutil.SegmentFiles(t, mem, "db", "torn")
	patchFile(t, mem, segs[0], func(b []byte) []byte { return b[:len(b)-5] })
	torn := nextSegmentPath(t, mem, "torn")
	testutil.WriteFile(mem, torn, []byte("ADB"))
	for i := 0; i < 2; i++ {
		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			t.Fatalf("open %d: %v", i+1, err)
		}
		info, _, err := db.AnchorInfo(context.Background(), "torn")
		if err != nil {
			t.Fatal(err)
		}
		if info.Damage == "" {
			t.Fatalf("open %d: the anchor with a torn seal is not damaged", i+1)
		}
		for _, ev := range db.RecoveryReport().Events {
			if ev.File == torn && ev.Kind == EventRemoved {
				t.Errorf("open %d: the torn newest segment of a damaged anchor was removed: %v", i+1, ev)
			}
		}
		if data, err := testutil.ReadFile(mem, torn); err != nil || string(data) != "ADB" {
			t.Fatalf("open %d: the torn newest segment of a damaged anchor changed: %q %v", i+1, data, err)
		}
		// Leave the next Open unclean, so that it reconciles again.
		crashed := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
		_ = db.Close()
		mem = crashed
	}

	// The same torn file beside an undamaged anchor is removed (its bytes
	// kept in lost+found), and the anchor stays writable.
	mem, acked := uncleanWithSealed(t, true)
	torn = nextSegmentPath(t, mem, "torn")
	testutil.WriteFile(mem, torn, []byte("ADB"))
	db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	removed := false
	for _, ev := range db.RecoveryReport().Events {
		removed = removed || (ev.File == torn && ev.Kind == EventRemoved && ev.Saved != "")
	}
	if _, err := mem.Stat(torn); !removed || err == nil {
		t.Errorf("the torn newest segment of an intact anchor was not removed and saved: %v", db.RecoveryReport().Events)
	}
	checkDB(t, db, acked)
	if _, err := db.Put(context.Background(), "torn", []byte("k"), []byte("v")); err != nil {
		t.Fatalf("append after the torn segment was removed: %v", err)
	}
}

// nextSegmentPath returns the path of the segment an anchor of the unclean
// database in mem would create next once recovered: recovery (journal
// replay) may first create segments the crash left unwritten, so it is
// found by recovering a copy.
func nextSegmentPath(t *testing.T, mem *vfs.MemFS, anchor string) string {
	t.Helper()
	c := testutil.CrashClone(mem, vfs.CrashCloneCfg{})
	db, err := Open("db", Options{FS: c, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	segs := testutil.SegmentFiles(t, c, "db", anchor)
	newest, _ := segment.ParseFileName(c.PathBase(segs[len(segs)-1]))
	return mem.PathJoin(segment.AnchorDir(mem, "db", anchor), segment.FileName(newest+1))
}
