package engine

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Bad input at and past every limit of SPEC §9 and illegal anchor ids:
// refused with INPUT_001, leaving the filesystem and the anchors as they were.

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
		{"time at the int64 limit", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("tmax"), Value: []byte("v"), Time: time.Unix(0, math.MaxInt64)}},
		{"time at the negative int64 limit", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("tmin"), Value: []byte("v"), Time: time.Unix(0, math.MinInt64)}},
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
		if err != nil || rec.Hash != r.Hash || !bytes.Equal(rec.Key, c.e.Key) || !bytes.Equal(rec.Value, c.e.Value) || !bytes.Equal(rec.IdempotencyKey, c.e.IdempotencyKey) || rec.Type != c.e.Type ||
			!c.e.Time.IsZero() && rec.Time.UnixNano() != c.e.Time.UnixNano() {
			t.Fatalf("%s: read back %v (%d-byte value), want the record appended", c.name, err, len(rec.Value))
		}
		if c.e.Type == segment.TypePut {
			v, err := db.Get(ctx, c.e.Key)
			if err != nil || !bytes.Equal(v.Value, c.e.Value) {
				t.Fatalf("%s: get: %v", c.name, err)
			}
		}
	}
	if err := db.Sync(context.Background()); err != nil {
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
	for p := range testutil.Tree(t, mem, "db") {
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
		{"counter above MaxCallerCounter", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: MaxCallerCounter + 1}, strconv.FormatUint(MaxCallerCounter, 10)},
		{"counter MaxCounter", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: MaxCounter}, strconv.FormatUint(MaxCallerCounter, 10)},
		{"counter 2^64-1", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Counter: ^uint64(0)}, strconv.FormatUint(MaxCallerCounter, 10)},
		// int64 Unix nanoseconds wrap outside these years: the record would
		// say another time (stop 18's review).
		{"time in the year 3000", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, "1678..2262"},
		{"time in the year 1000", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Time: time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)}, "1678..2262"},
		{"time 1 ns past int64", Entry{Anchor: "lim", Type: segment.TypePut, Key: []byte("k"), Value: []byte("v"), Time: time.Unix(0, math.MaxInt64).Add(1)}, "1678..2262"},
	}
	// Pebble's own directory changes on its own (compactions, obsolete
	// files): index rows are checked through Anchors and the metrics
	// instead.
	tree := func() map[string]int64 {
		m := testutil.Tree(t, mem, "db")
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
	if d := testutil.DiffTrees(beforeTree, tree()); d != "" {
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

	// The largest counter a caller may supply is accepted, and leaves the
	// Lamport clock room: default-counter appends go on after it, on every
	// anchor. (Before the caller limit, a counter of MaxCounter made every
	// later default-counter append fail with the clock exhausted.)
	r, err := db.Append(ctx, Entry{Anchor: "maxc", Type: segment.TypePut, Key: []byte("m"), Value: []byte("v"), Counter: MaxCallerCounter})
	if err != nil || r.Counter != MaxCallerCounter {
		t.Fatalf("counter MaxCallerCounter: %+v %v", r, err)
	}
	for i, anchor := range []string{"after-max", "maxc", "after-max"} {
		r, err := db.Put(ctx, anchor, []byte("k"), []byte("v"))
		if want := MaxCallerCounter + 1 + uint64(i); err != nil || r.Counter != want {
			t.Fatalf("default counter after MaxCallerCounter on %q: %+v %v, want counter %d", anchor, r, err, want)
		}
	}

	// A record arriving verbatim (ingest) may carry any counter up to
	// MaxCounter: one that does exhausts the clock, and a default-counter
	// append is then refused with a code, appending nothing.
	rec := segment.Record{Anchor: "maxc-ingested", Seq: 1, Counter: MaxCounter, Time: 1, Type: segment.TypePut,
		Key: []byte("m"), Value: []byte("v"), PrevHash: segment.GenesisHash("maxc-ingested")}
	rec.Hash = rec.ComputeHash()
	if err := db.appendVerbatim(ctx, []segment.Record{rec}); err != nil {
		t.Fatalf("verbatim record with counter MaxCounter: %v", err)
	}
	before := anchorIDs(t, db)
	if _, err := db.Put(ctx, "after-exhausted", []byte("k"), []byte("v")); !errors.Is(err, ErrConflict) {
		t.Errorf("a default counter past MaxCounter: want STATE_002, got %v", err)
	}
	if ids := anchorIDs(t, db); !slices.Equal(ids, before) {
		t.Errorf("the refused append changed the anchors: %q → %q", before, ids)
	}
}
