package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"
)

// mergeAnchors sort differently by locale than by bytes: "Z" < "a" < "e\u0301"
// < "é" < "ä" as bytes.
var mergeAnchors = []string{"Z", "a", "é", "e\u0301", "ä", "a/b", "../x"}

type plannedAppend struct {
	anchor  string
	counter uint64 // 0: the clock assigns one
	typ     string
	key     string
	value   string
}

// genLogs draws per-anchor logs with caller-supplied counters (increasing per
// anchor, with ties across anchors) and some clock-assigned ones.
func genLogs(t *rapid.T) []plannedAppend {
	var out []plannedAppend
	n := rapid.IntRange(1, 60).Draw(t, "n")
	last := map[string]uint64{}
	for i := 0; i < n; i++ {
		a := rapid.SampledFrom(mergeAnchors).Draw(t, "anchor")
		c := last[a] + uint64(rapid.IntRange(1, 3).Draw(t, "step"))
		last[a] = c
		typ := rapid.SampledFrom([]string{"put", "put", "delete", "EVENT"}).Draw(t, "type")
		k := fmt.Sprintf("k%d", rapid.IntRange(0, 5).Draw(t, "key"))
		if typ == "EVENT" {
			k = ""
		}
		out = append(out, plannedAppend{anchor: a, counter: c, typ: typ, key: k, value: fmt.Sprintf("v%d", i)})
	}
	return out
}

func appendPlanned(t *rapid.T, db *DB, plan []plannedAppend) {
	for _, p := range plan {
		// Fixed times: the same records must hash the same in every database.
		e := Entry{Anchor: p.anchor, Type: p.typ, Counter: p.counter, Time: time.Unix(1_700_000_000, int64(p.counter))}
		if p.key != "" {
			e.Key = []byte(p.key)
		}
		if p.typ != "delete" {
			e.Value = []byte(p.value)
		}
		if _, err := db.Append(context.Background(), e); err != nil {
			t.Fatalf("append %+v: %v", p, err)
		}
	}
}

// reference sorts every record by (counter, anchor bytes) and replays it.
func reference(t *rapid.T, db *DB, f merge.Frontier) ([]segment.Record, map[string]string) {
	var all []segment.Record
	for _, a := range f.Anchors() {
		for rec, err := range db.Log(context.Background(), a, 1, f[a]) {
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, *rec.segment())
		}
	}
	slices.SortFunc(all, func(x, y segment.Record) int {
		if x.Counter != y.Counter {
			if x.Counter < y.Counter {
				return -1
			}
			return 1
		}
		switch {
		case x.Anchor < y.Anchor: // Go string comparison is byte order
			return -1
		case x.Anchor > y.Anchor:
			return 1
		}
		return 0
	})
	state := map[string]string{}
	for _, r := range all {
		switch r.Type {
		case "put":
			state[string(r.Key)] = string(r.Value)
		case "delete":
			delete(state, string(r.Key))
		}
	}
	return all, state
}

// checkAgainstReplay checks db against a replay of every record inside f
// sorted by (counter, anchor id bytes): the merged view (positions dense
// from 1), Get of the keys k0..k5, and GetAt at a random prefix of every
// log. It returns the reference order.
func checkAgainstReplay(t *rapid.T, db *DB, f merge.Frontier) []segment.Record {
	ctx := context.Background()
	want, state := reference(t, db, f)
	var got []segment.Record
	for p, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if p.Pos != uint64(len(got)+1) {
			t.Fatalf("position %d at index %d", p.Pos, len(got))
		}
		got = append(got, *p.segment())
	}
	if len(got) != len(want) {
		t.Fatalf("merged %d records, reference %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Hash != want[i].Hash {
			t.Fatalf("position %d: %s/%d, reference %s/%d", i+1, got[i].Anchor, got[i].Seq, want[i].Anchor, want[i].Seq)
		}
	}
	for k := 0; k < 6; k++ {
		key := fmt.Sprintf("k%d", k)
		v, err := db.Get(ctx, []byte(key))
		w, ok := state[key]
		if ok != (err == nil) || (ok && string(v.Value) != w) {
			t.Fatalf("get %s = %q %v, reference %q %v", key, v.Value, err, w, ok)
		}
	}
	half := merge.Frontier{}
	for a, s := range f {
		half[a] = rapid.Uint64Range(0, s).Draw(t, "cut")
	}
	_, hstate := reference(t, db, half)
	for k := 0; k < 6; k++ {
		key := fmt.Sprintf("k%d", k)
		v, err := db.GetAt(ctx, []byte(key), half)
		w, ok := hstate[key]
		if ok != (err == nil) || (ok && string(v.Value) != w) || (!ok && !errors.Is(err, ErrNotFound)) {
			t.Fatalf("getat %s = %q %v, reference %q %v", key, v.Value, err, w, ok)
		}
	}
	return want
}

func TestMergedOrderIsDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		plan := genLogs(t)
		// The same per-anchor logs, appended in another interleaving.
		perm := slices.Clone(plan)
		seen := map[string]int{}
		order := rapid.Permutation(perm).Draw(t, "order")
		// Keep each anchor's own order: reassign the permuted slots in order.
		byAnchor := map[string][]plannedAppend{}
		for _, p := range plan {
			byAnchor[p.anchor] = append(byAnchor[p.anchor], p)
		}
		for i, p := range order {
			perm[i] = byAnchor[p.anchor][seen[p.anchor]]
			seen[p.anchor]++
		}
		var roots []segment.Hash
		for _, pl := range [][]plannedAppend{plan, perm} {
			fs := vfs.NewMem()
			db, err := Open("db", Options{FS: fs, SegmentSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			appendPlanned(t, db, pl)
			ctx := context.Background()
			f, err := db.Frontier(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := checkAgainstReplay(t, db, f)
			root, n, err := db.MergedRoot(ctx, nil)
			if err != nil || n != uint64(len(want)) {
				t.Fatalf("merged root: %v n=%d", err, n)
			}
			roots = append(roots, root)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if roots[0] != roots[1] {
			t.Fatalf("the same records in another append order give another merged root")
		}
	})
}

func TestMergedTiesBreakByAnchorBytes(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	for _, a := range []string{"é", "a", "Z", "e\u0301", "ä"} {
		if _, err := db.Append(ctx, Entry{Anchor: a, Type: "put", Key: []byte("x"), Value: []byte(a), Counter: 7}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for p, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Record.Anchor)
	}
	want := []string{"Z", "a", "e\u0301", "ä", "é"}
	if !slices.Equal(got, want) {
		t.Fatalf("merged %q, want %q", got, want)
	}
	v, err := db.Get(ctx, []byte("x"))
	if err != nil || string(v.Value) != "é" {
		t.Fatalf("get = %q %v, want the highest anchor bytes (é)", v.Value, err)
	}
	for p, err := range db.Merged(ctx, MergedOptions{From: 4}) {
		if err != nil || p.Pos < 4 {
			t.Fatalf("from 4: %+v %v", p, err)
		}
	}
	// CONTRACT §8: a frontier naming an unknown anchor is STATE_003, not an
	// empty log, whose answer would change once the anchor arrives.
	if _, err := db.GetAt(ctx, []byte("x"), merge.Frontier{"nope": 1}); !errors.Is(err, ErrDependencyMissing) {
		t.Fatalf("getat with an unknown anchor: %v, want STATE_003", err)
	}
	for _, err := range db.Merged(ctx, MergedOptions{Frontier: merge.Frontier{"a": 5}}) {
		if !errors.Is(err, ErrDependencyMissing) {
			t.Fatalf("a frontier past the head: %v, want STATE_003", err)
		}
	}
}

// After an ingest of another database's anchors, whose counters interleave
// with ours and tie with them, the merged view is every record sorted by
// (counter, anchor id bytes), Get is the replay of it, and GetAt at any
// prefix frontier is the replay up to it (CONTRACT §1, §4). Local writes
// after the ingest sort last.
func TestIngestedMergedViewMatchesReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		fs := vfs.NewMem()
		src, err := Open("src", Options{FS: fs, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		dst, err := Open("dst", Options{FS: fs, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		plan := genLogs(t)
		// Each anchor lives on one side (one written on both would be a
		// fork). The source's are ingested in two exchanges, so the second
		// extends anchors the first joined.
		side := map[string]bool{}
		for _, a := range mergeAnchors {
			side[a] = rapid.Bool().Draw(t, "side "+a)
		}
		m := rapid.IntRange(0, len(plan)).Draw(t, "exchange at")
		for i, p := range plan {
			if i == m {
				if err := src.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
					t.Fatalf("first ingest: %v", err)
				}
				if src, err = Open("src", Options{FS: fs, SegmentSize: 4096}); err != nil {
					t.Fatal(err)
				}
			}
			db := dst
			if side[p.anchor] {
				db = src
			}
			appendPlanned(t, db, []plannedAppend{p})
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := dst.Ingest(ctx, "src", IngestOptions{}); err != nil {
			t.Fatalf("ingest: %v", err)
		}
		f, err := dst.Frontier(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.Total() != uint64(len(plan)) {
			t.Fatalf("frontier holds %d records, %d were written", f.Total(), len(plan))
		}
		checkAgainstReplay(t, dst, f)
		// The clock moved past what arrived: a default-counter write wins.
		for _, a := range []string{"Z", "local"} {
			if _, err := dst.Put(ctx, a, []byte("k0"), []byte("last "+a)); err != nil {
				t.Fatal(err)
			}
			if v, err := dst.Get(ctx, []byte("k0")); err != nil || string(v.Value) != "last "+a {
				t.Fatalf("a write after the ingest does not win: %q %v", v.Value, err)
			}
		}
	})
}

// A frontier names a prefix of every log, and the state at it is
// deterministic (CONTRACT §1). One that names a seq past an anchor's head
// names records that do not exist: GetAt refuses it with STATE_003 (CONTRACT
// §8), as Merged does, rather than answer from whatever the anchor holds
// now, an answer a later append to the anchor changes.
func TestGetAtRefusesAFrontierPastTheHead(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("one")); err != nil {
		t.Fatal(err)
	}
	f := merge.Frontier{"a": 2}
	for _, err := range db.Merged(ctx, MergedOptions{Frontier: f}) {
		if !errors.Is(err, ErrDependencyMissing) {
			t.Fatalf("merged at a frontier past the head: %v, want STATE_003", err)
		}
	}
	before, err := db.GetAt(ctx, []byte("k"), f)
	if !errors.Is(err, ErrDependencyMissing) {
		if _, err := db.Put(ctx, "a", []byte("k"), []byte("two")); err != nil {
			t.Fatal(err)
		}
		after, err2 := db.GetAt(ctx, []byte("k"), f)
		t.Fatalf("getat at a frontier past the head answers %q (%v), then %q (%v) after an append; want STATE_003",
			before.Value, err, after.Value, err2)
	}
}

// Merged holds a small buffer per anchor (CONTRACT §4, DESIGN §10), sized so
// that 100,000 anchors stay in memory. Refills run one at a time, so one 32
// KiB read-ahead buffer serves them all; one kept by each source between
// refills would be 33 KB an anchor, 3.3 GB for 100,000 anchors.
func TestMergedMemoryPerAnchor(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 4,000 anchors")
	}
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer db.Close()
	const n = 4000
	var batch []Entry
	for i := 0; i < n; i++ {
		batch = append(batch, Entry{Anchor: fmt.Sprintf("a%05d", i), Type: "put", Key: []byte("k"), Value: []byte("v")})
		if len(batch) == 500 {
			if _, err := db.AppendBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	runtime.GC()
	var before, during runtime.MemStats
	runtime.ReadMemStats(&before)
	i := 0
	for _, err := range db.Merged(ctx, MergedOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if i++; i == n/2 { // every source has been read from
			runtime.GC()
			runtime.ReadMemStats(&during)
		}
	}
	if i != n {
		t.Fatalf("merged %d records, want %d", i, n)
	}
	perAnchor := (int64(during.HeapAlloc) - int64(before.HeapAlloc)) / n
	if perAnchor > 8<<10 {
		t.Fatalf("Merged holds %d bytes an anchor over %d anchors of one record each", perAnchor, n)
	}
}
