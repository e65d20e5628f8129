package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Bad input at and past every limit of SPEC §9, illegal anchor ids, records
// spliced between anchors and positions, torn sealed segments, segment sizes
// at the sealing boundary, many anchors with few descriptors, and an index
// that is lost, behind or ahead of the segments.

// fsTree lists every file and directory under root with its size.
func fsTree(t testing.TB, fs vfs.FS, root string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var walk func(dir string)
	walk = func(dir string) {
		names, err := fs.List(dir)
		if err != nil {
			t.Fatalf("list %s: %v", dir, err)
		}
		for _, n := range names {
			p := fs.PathJoin(dir, n)
			st, err := fs.Stat(p)
			if err != nil {
				t.Fatalf("stat %s: %v", p, err)
			}
			if st.IsDir() {
				out[p+"/"] = -1
				walk(p)
			} else {
				out[p] = st.Size()
			}
		}
	}
	walk(root)
	return out
}

func diffTrees(a, b map[string]int64) string {
	var d []string
	for p, s := range a {
		if t, ok := b[p]; !ok {
			d = append(d, "-"+p)
		} else if s != t {
			d = append(d, fmt.Sprintf("~%s %d→%d", p, s, t))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, "+"+p)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

func anchorIDs(t testing.TB, db *DB) []string {
	t.Helper()
	var ids []string
	for info, err := range db.Anchors(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	return ids
}

func TestInputLimits(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	// No background settle during the test: the file tree must stand still
	// unless an append changes it.
	db := mustOpen(t, mem, Options{SegmentSize: 1 << 20, SettleInterval: time.Hour})
	defer db.Close()
	lim := segment.DefaultLimits()
	if lim.MaxKey != 64<<10 || lim.MaxValue != 16<<20 || lim.MaxIdempotencyKey != 256 || segment.MaxAnchorID != 255 {
		t.Fatalf("default limits %+v, anchor id %d: not SPEC §9", lim, segment.MaxAnchorID)
	}
	// Something in the database first, so "nothing left behind" is measured
	// against a populated tree.
	if _, err := db.Put(ctx, "base", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	long := func(n int, c byte) string { return strings.Repeat(string(c), n) }

	// Accepted at the limit, read back whole.
	accepted := []struct {
		name string
		e    Entry
	}{
		{"key of 64 KiB", Entry{Anchor: "lim", Type: segment.TypePut, Key: bytes.Repeat([]byte{'k'}, lim.MaxKey), Value: []byte("v")}},
		{"value of 16 MiB", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("big"), Value: bytes.Repeat([]byte{'v'}, lim.MaxValue)}},
		{"idempotency key of 256 bytes", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("i"), Value: []byte("v"), IdempotencyKey: bytes.Repeat([]byte{'i'}, lim.MaxIdempotencyKey)}},
		{"anchor id of 255 bytes", Entry{Anchor: long(255, 'a'), Type: segment.TypePut, Key: []byte("k255"), Value: []byte("v")}},
		{"anchor id of 255 bytes of UTF-8", Entry{Anchor: strings.Repeat("é", 127) + "x", Type: segment.TypePut, Key: []byte("k255u"), Value: []byte("v")}},
		{"type of 64 bytes", Entry{Anchor: "lim", Type: long(64, 'T'), Value: []byte("payload")}},
		{"anchor id ../x", Entry{Anchor: "../x", Type: segment.TypePut, Key: []byte("dotdot"), Value: []byte("v")}},
		{"anchor id a/b", Entry{Anchor: "a/b", Type: segment.TypePut, Key: []byte("slash"), Value: []byte("v")}},
		{"anchor id .", Entry{Anchor: ".", Type: segment.TypePut, Key: []byte("dot"), Value: []byte("v")}},
		{"anchor id ..", Entry{Anchor: "..", Type: segment.TypePut, Key: []byte("dotdot2"), Value: []byte("v")}},
		{"anchor id /abs", Entry{Anchor: "/etc/passwd", Type: segment.TypePut, Key: []byte("abs"), Value: []byte("v")}},
		{"anchor id with a backslash", Entry{Anchor: `..\x`, Type: segment.TypePut, Key: []byte("bs"), Value: []byte("v")}},
	}
	for _, c := range accepted {
		r, err := db.Append(ctx, c.e)
		if err != nil {
			t.Fatalf("%s: refused: %v", c.name, err)
		}
		rec, err := db.Record(ctx, c.e.Anchor, r.Seq)
		if err != nil || rec.Hash != r.Hash || !bytes.Equal(rec.Key, c.e.Key) || !bytes.Equal(rec.Value, c.e.Value) || !bytes.Equal(rec.IdempotencyKey, c.e.IdempotencyKey) || rec.Type != c.e.Type {
			t.Fatalf("%s: read back %v (%d-byte value), want the record appended", c.name, err, len(rec.Value))
		}
		if c.e.Type == segment.TypePut {
			v, err := db.Get(ctx, c.e.Key)
			if err != nil || !bytes.Equal(v.Value, c.e.Value) {
				t.Fatalf("%s: get: %v", c.name, err)
			}
		}
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	// Anchor ids never become path components: nothing is created outside
	// the database directory, everything under anchors/ is
	// anchors/<2 hex>/<30 hex>/<segment>, and no path anywhere has a
	// component taken from an id.
	if root, err := mem.List(""); err != nil || !slices.Equal(root, []string{"db"}) {
		t.Fatalf("the filesystem root holds %q (%v): an anchor id escaped the database directory?", root, err)
	}
	idParts := map[string]bool{}
	for _, c := range accepted {
		for _, p := range strings.FieldsFunc(c.e.Anchor, func(r rune) bool { return r == '/' }) {
			if p != "." && p != ".." {
				idParts[p] = true
			}
		}
	}
	for p := range fsTree(t, mem, "db") {
		rel := strings.TrimSuffix(strings.TrimPrefix(p, "db/"), "/")
		parts := strings.Split(rel, "/")
		for _, part := range parts {
			if idParts[part] {
				t.Fatalf("path %q has a component taken from an anchor id", p)
			}
		}
		if parts[0] != segment.AnchorsDir || len(parts) == 1 {
			continue
		}
		ok := len(parts[1]) == 2 && isHex(parts[1])
		if ok && len(parts) >= 3 {
			ok = len(parts[2]) == 30 && isHex(parts[2])
		}
		if ok && len(parts) == 4 {
			_, ok = segment.ParseFileName(parts[3])
		}
		if !ok || len(parts) > 4 {
			t.Fatalf("unexpected path %q under %s/", p, segment.AnchorsDir)
		}
	}

	// Refused one past the limit, or malformed: INPUT_001 naming the limit,
	// and nothing left behind.
	refused := []struct {
		name  string
		e     Entry
		names string // a word the message must contain
	}{
		{"key of 64 KiB + 1", Entry{Anchor: "lim", Type: segment.TypePut, Key: bytes.Repeat([]byte{'k'}, lim.MaxKey+1), Value: []byte("v")}, "65536"},
		{"value of 16 MiB + 1", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("big"), Value: bytes.Repeat([]byte{'v'}, lim.MaxValue+1)}, "16777216"},
		{"idempotency key of 257 bytes", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("i"), Value: []byte("v"), IdempotencyKey: bytes.Repeat([]byte{'i'}, lim.MaxIdempotencyKey+1)}, "256"},
		{"anchor id of 256 bytes", Entry{Anchor: long(256, 'a'), Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "255"},
		{"anchor id of 256 bytes on a new anchor", Entry{Anchor: long(256, 'n'), Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "255"},
		{"empty anchor id", Entry{Anchor: "", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "255"},
		{"anchor id of invalid UTF-8", Entry{Anchor: "bad\xff\xfe", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "UTF-8"},
		{"anchor id with NUL", Entry{Anchor: "a\x00b", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "control"},
		{"anchor id with newline", Entry{Anchor: "a\nb", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "control"},
		{"anchor id with DEL", Entry{Anchor: "a\x7fb", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "control"},
		{"anchor id with C1 control", Entry{Anchor: "a\u0085b", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v")}, "control"},
		{"type of 65 bytes", Entry{Anchor: "lim", Type: long(65, 'T'), Value: []byte("v")}, "64"},
		{"empty type", Entry{Anchor: "lim", Type: "", Value: []byte("v")}, "64"},
		{"put without a key", Entry{Anchor: "lim", Type: segment.TypePut, Value: []byte("v")}, "key"},
		{"delete without a key", Entry{Anchor: "lim", Type: segment.TypeDelete}, "key"},
		{"delete with a value", Entry{Anchor: "lim", Type: segment.TypeDelete, Key: []byte("k"), Value: []byte("v")}, "value"},
		{"counter above MaxCounter", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: MaxCounter + 1}, strconv.FormatUint(MaxCounter, 10)},
		{"counter 2^64-1", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: ^uint64(0)}, strconv.FormatUint(MaxCounter, 10)},
	}
	// Pebble's own directory changes on its own (compactions, obsolete
	// files): index rows are checked through Anchors and the metrics
	// instead.
	tree := func() map[string]int64 {
		m := fsTree(t, mem, "db")
		for p := range m {
			if strings.HasPrefix(p, "db/"+IndexDir+"/") {
				delete(m, p)
			}
		}
		return m
	}
	beforeIDs := anchorIDs(t, db)
	beforeTree := tree()
	beforeMetrics := db.Metrics()
	for _, c := range refused {
		_, err := db.Append(ctx, c.e)
		if !errors.Is(err, ErrInvalidInput) || CodeOf(err) != "INPUT_001" {
			t.Errorf("%s: want INPUT_001, got %v", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.names) {
			t.Errorf("%s: message %q does not name the limit (%s)", c.name, err, c.names)
		}
		// The same entry inside a batch refuses the whole batch.
		_, err = db.AppendBatch(ctx, []Entry{
			{Anchor: "batch-ok-1", Type: segment.TypePut, Key: []byte("bk"), Value: []byte("v")},
			c.e,
			{Anchor: "batch-ok-2", Type: "EV", Value: []byte("v")},
		})
		if !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s in a batch: want INPUT_001, got %v", c.name, err)
		}
	}
	if ids := anchorIDs(t, db); !slices.Equal(ids, beforeIDs) {
		t.Errorf("refused appends changed the anchors: %q → %q", beforeIDs, ids)
	}
	if m := db.Metrics(); m.Records != beforeMetrics.Records || m.Groups != beforeMetrics.Groups {
		t.Errorf("refused appends were committed: %+v → %+v", beforeMetrics, m)
	}
	if d := diffTrees(beforeTree, tree()); d != "" {
		t.Errorf("refused appends left files behind:\n%s", d)
	}
	for _, c := range refused {
		if c.e.Anchor != "" && segment.ValidateAnchorID(c.e.Anchor) != nil {
			if _, err := mem.Stat(segment.AnchorDir(mem, "db", c.e.Anchor)); err == nil {
				t.Errorf("%s: an anchor directory was created", c.name)
			}
		}
	}

	// Reads refuse bad input the same way, without panicking.
	if _, err := db.Get(ctx, nil); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("get of an empty key: %v", err)
	}
	if _, err := db.Get(ctx, bytes.Repeat([]byte{'k'}, lim.MaxKey+1)); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("get of an oversize key: %v", err)
	}
	for _, bad := range []string{"", long(256, 'a'), "x\xff", "a\x00"} {
		for _, err := range db.Log(ctx, bad, 1, 0) {
			if !errors.Is(err, ErrInvalidInput) {
				t.Errorf("log of anchor %q: %v", bad, err)
			}
		}
		if _, err := db.Record(ctx, bad, 1); err == nil || CodeOf(err) == "" {
			t.Errorf("record of anchor %q: %v", bad, err)
		}
	}
	for _, err := range db.History(ctx, nil) {
		if !errors.Is(err, ErrInvalidInput) {
			t.Errorf("history of an empty key: %v", err)
		}
	}

	// The largest counter is accepted; the Lamport clock then has nowhere to
	// go, and a default-counter append is refused with a code, appending
	// nothing.
	r, err := db.Append(ctx, Entry{Anchor: "maxc", Type: segment.TypePut, Key: []byte("m"), Value: []byte("v"), Counter: MaxCounter})
	if err != nil || r.Counter != MaxCounter {
		t.Fatalf("counter MaxCounter: %+v %v", r, err)
	}
	before := anchorIDs(t, db)
	if _, err := db.Put(ctx, "after-max", []byte("k"), []byte("v")); err == nil || CodeOf(err) == "" {
		t.Errorf("a default counter past MaxCounter: want a coded refusal, got %v", err)
	}
	if ids := anchorIDs(t, db); !slices.Equal(ids, before) {
		t.Errorf("the refused append changed the anchors: %q → %q", before, ids)
	}
}

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

// segmentFiles returns the anchor's segment paths in order.
func segmentFiles(t testing.TB, fs vfs.FS, dir, anchor string) []string {
	t.Helper()
	adir := segment.AnchorDir(fs, dir, anchor)
	names, err := fs.List(adir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, ok := segment.ParseFileName(n); ok {
			out = append(out, fs.PathJoin(adir, n))
		}
	}
	sort.Strings(out)
	return out
}

// frames returns each frame of a segment file with its offset and bytes.
func frames(t testing.TB, fs vfs.FS, path string) (hdr segment.Header, offs []int64, bufs [][]byte) {
	t.Helper()
	data, err := readMemFile(fs, path)
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
	data, err := readMemFile(fs, path)
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
	data, err := readMemFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	writeMemFile(fs, path, fn(slices.Clone(data)))
}

func TestSplicedFrames(t *testing.T) {
	ctx := context.Background()
	anchors := []string{"splice-a", "splice-b"}

	t.Run("frame of another anchor", func(t *testing.T) {
		mem := vfs.NewMem()
		acked := closedDB(t, mem, anchors, 30)
		aSegs := segmentFiles(t, mem, "db", "splice-a")
		bSegs := segmentFiles(t, mem, "db", "splice-b")
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
		aSegs := segmentFiles(t, mem, "db", "splice-a")
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
		if err := db.Sync(); err != nil {
			t.Fatal(err)
		}
		crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: newRand(1)})
		_ = db.Close()
		bSegs := segmentFiles(t, crashed, "db", "splice-b")
		aSegs := segmentFiles(t, crashed, "db", "splice-a")
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
		info, _, err := db.AnchorInfo("splice-b")
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
			if err := db.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: newRand(3)})
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
		segs := segmentFiles(t, mem, "db", "torn")
		if len(segs) < 4 {
			t.Fatalf("anchor has %d segments, want 4 or more", len(segs))
		}
		// Cut a few bytes off the first (sealed, settled) segment: its seal
		// is torn.
		_, offs, _ := frames(t, mem, segs[0])
		full, _ := readMemFile(mem, segs[0])
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
		info, _, err := db.AnchorInfo("torn")
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
		if data, _ := readMemFile(mem, segs[0]); !bytes.Equal(data, full[:len(full)-5]) {
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
		segs := segmentFiles(t, mem, "db", "torn")
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
			if err := db.Sync(); err != nil {
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
					next := mem.CrashClone(vfs.CrashCloneCfg{})
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
					segs := segmentFiles(t, mem, "db", an)
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
					info, _, _ := db.AnchorInfo(an)
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
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
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

func TestManyAnchorsFewFiles(t *testing.T) {
	ctx := context.Background()
	anchors := 2000
	if testing.Short() {
		anchors = 500
	}
	const cache = 8
	dir := t.TempDir()
	segRoot := filepath.Join(dir, "db", segment.AnchorsDir)
	// Few descriptors to go round: if the engine held one per anchor, it
	// would run out long before 2,000.
	defer lowerFDLimit(t, 64)()
	opts := Options{FS: vfs.Default, FileCacheSize: cache, SegmentSize: 8192}
	valueLen := []int{100, 5000} // the second is not kept inline in the index
	db, err := Open(filepath.Join(dir, "db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	// Watch the descriptors the whole time.
	var maxFDs, maxCached atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	cur := atomic.Pointer[DB]{}
	cur.Store(db)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if n, ok := openSegmentFDs(segRoot); ok && int64(n) > maxFDs.Load() {
				maxFDs.Store(int64(n))
			}
		}
	}()
	// The cache's own count, at quiet moments.
	noteCached := func() {
		st, err := cur.Load().Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int64(st.OpenFiles) > maxCached.Load() {
			maxCached.Store(int64(st.OpenFiles))
		}
	}
	acks := &ackLog{}
	id := func(i int) string { return fmt.Sprintf("many/%04d", i) }
	for round := 0; round < len(valueLen); round++ {
		for start := 0; start < anchors; start += 100 {
			var es []Entry
			for i := start; i < start+100 && i < anchors; i++ {
				es = append(es, Entry{Anchor: id(i), Type: segment.TypePut, Key: []byte(fmt.Sprintf("k-%d", i)), Value: bytes.Repeat([]byte{'v'}, valueLen[round])})
			}
			rs, err := db.AppendBatch(ctx, es)
			if err != nil {
				t.Fatal(err)
			}
			for j := range rs {
				acks.add(es[j], rs[j])
			}
		}
		noteCached()
		// Reads across every anchor.
		for i := 0; i < anchors; i++ {
			if _, err := db.Record(ctx, id(i), uint64(round+1)); err != nil {
				t.Fatal(err)
			}
			if round == 1 && i%10 == 0 {
				// Not inline: Get reads the segment.
				if v, err := db.Get(ctx, []byte(fmt.Sprintf("k-%d", i))); err != nil || len(v.Value) != valueLen[1] {
					t.Fatalf("get k-%d: %d bytes, %v", i, len(v.Value), err)
				}
			}
		}
		noteCached()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if db, err = Open(filepath.Join(dir, "db"), opts); err != nil {
			t.Fatal(err)
		}
		cur.Store(db)
	}
	for i := 0; i < anchors; i += 7 {
		n := 0
		for _, err := range db.Log(ctx, id(i), 1, 0) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != len(valueLen) {
			t.Fatalf("anchor %s: %d records", id(i), n)
		}
	}
	checkDB(t, db, acks.snapshot())
	noteCached()
	close(stop)
	wg.Wait()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d anchors: at most %d segment files cached, %d segment descriptors open at once", anchors, maxCached.Load(), maxFDs.Load())
	if maxCached.Load() > cache {
		t.Errorf("the file cache held %d segment files, capacity %d", maxCached.Load(), cache)
	}
	// The cache bound, plus the one file a settle or a seal opens for its
	// fsync and a reader's file in use.
	if maxFDs.Load() > cache+2 {
		t.Errorf("%d segment descriptors were open at once with a file cache of %d", maxFDs.Load(), cache)
	}
}

// copyTree copies the subtree src of from into dst of to (MemFS to MemFS).
func copyTree(t testing.TB, from vfs.FS, src string, to vfs.FS, dst string) {
	t.Helper()
	if err := to.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	names, err := from.List(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		sp, dp := from.PathJoin(src, n), to.PathJoin(dst, n)
		st, err := from.Stat(sp)
		if err != nil {
			t.Fatal(err)
		}
		if st.IsDir() {
			copyTree(t, from, sp, to, dp)
			continue
		}
		data, err := readMemFile(from, sp)
		if err != nil {
			t.Fatal(err)
		}
		writeMemFile(to, dp, data)
	}
}

func TestIndexLostOrStale(t *testing.T) {
	ctx := context.Background()
	opts := Options{SegmentSize: 4096}
	build := func(t *testing.T, mem *vfs.MemFS, acks *ackLog, n int, tag string) {
		db := mustOpen(t, mem, opts)
		if err := workload(ctx, db, 3, n, acks); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			e := Entry{Anchor: "stale/" + tag, Type: segment.TypePut, Key: []byte(fmt.Sprintf("key-%d", i%4)), Value: bytes.Repeat([]byte(tag), 150)}
			r, err := db.Append(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			acks.add(e, r)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("deleted", func(t *testing.T) {
		mem := vfs.NewMem()
		acks := &ackLog{}
		build(t, mem, acks, 20, "a")
		if err := mem.RemoveAll("db/" + IndexDir); err != nil {
			t.Fatal(err)
		}
		db := mustOpen(t, mem, opts)
		defer db.Close()
		if !db.RecoveryReport().Rebuilt {
			t.Errorf("open after the index was deleted: RecoveryReport().Rebuilt is false: %+v", db.RecoveryReport())
		}
		checkDB(t, db, acks.snapshot())
		if _, err := db.Put(ctx, "stale/a", []byte("after"), []byte("rebuild")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("behind", func(t *testing.T) {
		// An older copy of the index (from a clean close) restored over a
		// newer one: the segments hold records it has never heard of.
		mem := vfs.NewMem()
		acks := &ackLog{}
		build(t, mem, acks, 10, "a")
		old := vfs.NewMem()
		copyTree(t, mem, "db/"+IndexDir, old, "index")
		build(t, mem, acks, 12, "b")
		if err := mem.RemoveAll("db/" + IndexDir); err != nil {
			t.Fatal(err)
		}
		copyTree(t, old, "index", mem, "db/"+IndexDir)

		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("open with a stale index: uncoded error %v", err)
			}
			t.Logf("open with a stale index refused: %v", err)
			return // reported, not served: acceptable
		}
		defer db.Close()
		// Adopted: every acknowledged record, old and new, is served from
		// its segment, and Get sees the newest versions.
		checkDB(t, db, acks.snapshot())
		// And the log continues where the segments end, not where the old
		// index did.
		r, err := db.Put(ctx, "stale/a", []byte("next"), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		all := acks.snapshot()
		var last uint64
		for _, a := range all {
			if a.Receipt.Anchor == "stale/a" {
				last = max(last, a.Seq)
			}
		}
		if r.Seq != last+1 {
			t.Errorf("append after a stale index got seq %d; the segments end at %d", r.Seq, last)
		}
		checkDB(t, db, append(all, ackedEntry{Receipt: r}))
	})

	t.Run("ahead", func(t *testing.T) {
		// The index knows records that the segments no longer hold (the
		// newest segment of an anchor lost its last records): never serve
		// them, never build on the hole.
		mem := vfs.NewMem()
		acks := &ackLog{}
		build(t, mem, acks, 10, "a")
		segs := segmentFiles(t, mem, "db", "stale/a")
		last := segs[len(segs)-1]
		_, offs, _ := frames(t, mem, last)
		if len(offs) < 2 {
			t.Fatalf("newest segment holds %d records", len(offs))
		}
		cut := offs[len(offs)-2]
		patchFile(t, mem, last, func(b []byte) []byte { return b[:cut] })
		var head uint64
		for _, a := range acks.snapshot() {
			if a.Receipt.Anchor == "stale/a" {
				head = max(head, a.Seq)
			}
		}
		db, err := Open("db", Options{FS: mem, SegmentSize: 4096})
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("open with an index ahead of the segments: uncoded error %v", err)
			}
			t.Logf("open refused: %v", err)
			return
		}
		defer db.Close()
		for seq := head - 1; seq <= head; seq++ {
			if rec, err := db.Record(ctx, "stale/a", seq); err == nil {
				t.Fatalf("record %d is served (%s) but no segment holds it", seq, rec.Hash)
			} else if !IsCorruption(err) && !errors.Is(err, ErrDependencyMissing) {
				t.Errorf("record %d: want INT_* or STATE_003, got %v", seq, err)
			}
		}
		// A write must not land after a hole, leaving a segment no scanner
		// can read: refused, or written where the records really end.
		r, err := db.Put(ctx, "stale/a", []byte("after"), []byte("hole"))
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("write after the hole: uncoded error %v", err)
			}
			return
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		segs = segmentFiles(t, mem, "db", "stale/a")
		if err := scanError(mem, segs[len(segs)-1]); err != nil {
			t.Fatalf("append %+v after the index ran ahead left a segment that does not scan: %v", r, err)
		}
	})
}
