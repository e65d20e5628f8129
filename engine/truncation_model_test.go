package engine

// A model check of reads, verify and both rebuilds after several
// truncations that keep each key's last version of every removed segment.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/anchordb/anchordb/merge"
	"github.com/cockroachdb/pebble/v2/vfs"
)

type cutModelRec struct {
	anchor  string
	seq     uint64
	counter uint64
	del     bool
	key     string
	value   string
}

func cutModelState(recs []cutModelRec, f merge.Frontier) map[string]string {
	var in []cutModelRec
	for _, r := range recs {
		if r.seq <= f[r.anchor] {
			in = append(in, r)
		}
	}
	sort.Slice(in, func(i, j int) bool {
		if in[i].counter != in[j].counter {
			return in[i].counter < in[j].counter
		}
		return in[i].anchor < in[j].anchor
	})
	st := map[string]string{}
	for _, r := range in {
		if r.del {
			delete(st, r.key)
		} else {
			st[r.key] = r.value
		}
	}
	return st
}

func checkCutModel(t *testing.T, db *DB, recs []cutModelRec, keys []string, when string, atCut bool) {
	t.Helper()
	ctx := context.Background()
	front, err := db.Frontier(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := cutModelState(recs, front)
	for _, k := range keys {
		v, err := db.Get(ctx, []byte(k))
		w, ok := want[k]
		switch {
		case ok && (err != nil || string(v.Value) != w):
			t.Errorf("%s: Get(%s) = %q, %v; want %q", when, k, v.Value, err, w)
		case !ok && !errors.Is(err, ErrNotFound):
			t.Errorf("%s: Get(%s) = %q, %v; want not found", when, k, v.Value, err)
		}
	}
	n := 0
	for v, err := range db.Scan(ctx, []byte("k")) {
		if err != nil {
			t.Fatalf("%s: scan: %v", when, err)
		}
		n++
		if w, ok := want[string(v.Key)]; !ok || w != string(v.Value) {
			t.Errorf("%s: Scan gives %s=%q; want %q (present %v)", when, v.Key, v.Value, w, ok)
		}
	}
	if n != len(want) {
		t.Errorf("%s: Scan gave %d keys, want %d", when, n, len(want))
	}
	if !atCut {
		return
	}
	// GetAt at every anchor's cut (the lowest frontier GetAt accepts).
	cut := merge.Frontier{}
	for id, seq := range front {
		first, err := db.firstPresent(id)
		if err != nil {
			t.Fatal(err)
		}
		cut[id] = max(first-1, min(seq, 1))
		if first == 1 {
			cut[id] = seq
		}
		if h, ok := db.histFrom[id]; ok && cut[id] < h {
			cut[id] = h // below it a fast-rebuilt index refuses (documented)
		}
	}
	wantCut := cutModelState(recs, cut)
	for _, k := range keys {
		v, err := db.GetAt(ctx, []byte(k), cut)
		w, ok := wantCut[k]
		switch {
		case ok && (err != nil || string(v.Value) != w):
			t.Errorf("%s: GetAt(%s, %v) = %q, %v; want %q", when, k, cut, v.Value, err, w)
		case !ok && !errors.Is(err, ErrNotFound):
			t.Errorf("%s: GetAt(%s, %v) = %q, %v; want not found", when, k, cut, v.Value, err)
		}
	}
}

func verifyClean(t *testing.T, db *DB, when string) {
	t.Helper()
	rep, err := db.Verify(context.Background(), VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("%s: verify: %v %+v", when, err, rep.Failures)
	}
}

// After two compactions that truncate, with keys rewritten and deleted
// across segments and anchors: Get, Scan and GetAt at the cut agree with a
// replay, verify passes, and so after a full rebuild and a rebuild from the
// snapshot.
func TestTruncationsAgainstAModel(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	opts := Options{FS: fs, SegmentSize: 2048, InlineValueMax: 16}
	db := mustOpen(t, fs, opts)
	rng := rand.New(rand.NewSource(7))
	var recs []cutModelRec
	var keys []string
	for i := 0; i < 12; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	anchors := []string{"a", "b", "c"}
	step := func(n int) {
		for i := 0; i < n; i++ {
			a := anchors[rng.Intn(len(anchors))]
			k := keys[rng.Intn(len(keys))]
			if rng.Intn(4) == 0 {
				r, err := db.Delete(ctx, a, []byte(k))
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, cutModelRec{a, r.Seq, r.Counter, true, k, ""})
				continue
			}
			v := fmt.Sprintf("%s-%d-%s", k, len(recs), "a longer value than inline")
			r, err := db.Put(ctx, a, []byte(k), []byte(v))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, cutModelRec{a, r.Seq, r.Counter, false, k, v})
		}
	}
	step(300)
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	step(300)
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact 2: %v %s", err, res.Plan)
	}
	checkCutModel(t, db, recs, keys, "after truncation 1", true)
	verifyClean(t, db, "after truncation 1")
	step(300)
	res, err = coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact 3: %v %s", err, res.Plan)
	}
	checkCutModel(t, db, recs, keys, "after truncation 2", true)
	verifyClean(t, db, "after truncation 2")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := RebuildIndex(ctx, "db", opts, true); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, opts)
	checkCutModel(t, db, recs, keys, "after a full rebuild", true)
	verifyClean(t, db, "after a full rebuild")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if kinds := rebuildFromSnapshot(t, opts); !kinds[EventStateFromSnapshot] {
		t.Errorf("the fast rebuild was abandoned on an ordinary database: %v", kinds)
	}
	db = mustOpen(t, fs, opts)
	checkCutModel(t, db, recs, keys, "after a rebuild from the snapshot", false)
	verifyClean(t, db, "after a rebuild from the snapshot")
	// More writes and another truncation on the fast-rebuilt index.
	step(300)
	res, err = coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil || res.RemovedBytes == 0 {
		t.Fatalf("compact 4: %v %s", err, res.Plan)
	}
	checkCutModel(t, db, recs, keys, "after truncation 3 on a fast-rebuilt index", true)
	verifyClean(t, db, "after truncation 3 on a fast-rebuilt index")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := RebuildIndex(ctx, "db", opts, true); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, opts)
	defer db.Close()
	checkCutModel(t, db, recs, keys, "after a last full rebuild", true)
	verifyClean(t, db, "after a last full rebuild")
}
