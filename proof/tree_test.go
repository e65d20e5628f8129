package proof

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

var ctx = context.Background()

// The 1000-record tree is shared by several tests; it is read-only.
var (
	smallOnce sync.Once
	smallSt   *MemStore
	smallRef  *refTree
	smallMu   sync.Mutex // the reference memo is a map
)

func small(t testing.TB) (*MemStore, *refTree) {
	smallOnce.Do(func() { smallSt, smallRef = buildRecords(t, 1000) })
	return smallSt, smallRef
}

// The 65537-leaf tree covers 2^16 ± 1.
var (
	bigOnce sync.Once
	bigSt   *MemStore
	bigRef  *refTree
)

func big(t testing.TB) (*MemStore, *refTree) {
	bigOnce.Do(func() { bigSt, bigRef = buildCheap(t, 65537) })
	return bigSt, bigRef
}

func TestRootEverySizeMatchesReference(t *testing.T) {
	const n = 1000
	st := NewMemStore()
	leaves := make([][]byte, 0, n)
	ref := newRefTree(nil)
	for size := uint64(0); size <= n; size++ {
		ref.leaves = leaves
		want := ref.mth(0, size)
		if got := st.Root(); string(got[:]) != string(want) {
			t.Fatalf("MemStore.Root at size %d = %x, reference %x", size, got, want)
		}
		if size == n {
			break
		}
		rh := recordHash(size)
		leaves = append(leaves, refLeaf(rh[:]))
		if err := st.Append(rh); err != nil {
			t.Fatal(err)
		}
	}
	// RootAt reads every historical size back from the stored levels.
	ref.leaves = leaves
	for size := uint64(0); size <= n; size++ {
		got, err := RootAt(ctx, st, size)
		if err != nil {
			t.Fatalf("RootAt(%d): %v", size, err)
		}
		if want := ref.mth(0, size); string(got) != string(want) {
			t.Fatalf("RootAt(%d) = %x, reference %x", size, got, want)
		}
	}
}

func TestRootAtBigSizes(t *testing.T) {
	st, ref := big(t)
	for _, size := range []uint64{255, 256, 257, 511, 512, 513, 65535, 65536, 65537} {
		got, err := RootAt(ctx, st, size)
		if err != nil {
			t.Fatalf("RootAt(%d): %v", size, err)
		}
		if want := ref.mth(0, size); string(got) != string(want) {
			t.Fatalf("RootAt(%d) = %x, reference %x", size, got, want)
		}
	}
}

func TestNodeHashMatchesReference(t *testing.T) {
	st, ref := small(t)
	smallMu.Lock()
	defer smallMu.Unlock()
	checked := 0
	for level := uint(0); level <= 9; level++ {
		for i := uint64(0); (i+1)<<level <= st.Size(); i++ {
			id := compact.NewNodeID(level, i)
			got, err := NodeHash(ctx, st, id)
			if err != nil {
				t.Fatalf("NodeHash(%+v): %v", id, err)
			}
			lo, hi := id.Coverage()
			if want := ref.mth(lo, hi); string(got) != string(want) {
				t.Fatalf("NodeHash(%+v) = %x, reference %x", id, got, want)
			}
			checked++
		}
	}
	if checked < 1900 {
		t.Fatalf("checked only %d nodes", checked)
	}

	// Stored levels 8 and 16 and the unstored levels between and above them.
	bst, bref := big(t)
	for _, id := range []compact.NodeID{
		{Level: 8, Index: 0}, {Level: 8, Index: 255}, {Level: 9, Index: 127}, {Level: 12, Index: 3},
		{Level: 15, Index: 0}, {Level: 15, Index: 1}, {Level: 16, Index: 0}, {Level: 0, Index: 65536},
		{Level: 7, Index: 511}, {Level: 1, Index: 32767},
	} {
		got, err := NodeHash(ctx, bst, id)
		if err != nil {
			t.Fatalf("NodeHash(%+v): %v", id, err)
		}
		lo, hi := id.Coverage()
		if want := bref.mth(lo, hi); string(got) != string(want) {
			t.Fatalf("NodeHash(%+v) = %x, reference %x", id, got, want)
		}
	}
}

// countingStore counts the hashes served per call.
type countingStore struct {
	NodeStore
	mu    sync.Mutex
	calls []uint64
}

func (c *countingStore) Nodes(ctx context.Context, level uint, begin, end uint64) ([][]byte, error) {
	c.mu.Lock()
	c.calls = append(c.calls, end-begin)
	c.mu.Unlock()
	return c.NodeStore.Nodes(ctx, level, begin, end)
}

func TestNodeHashReadsAtMost128(t *testing.T) {
	bst, _ := big(t)
	cs := &countingStore{NodeStore: bst}
	for level := uint(0); level <= 16; level++ {
		if _, err := NodeHash(ctx, cs, compact.NewNodeID(level, 0)); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range cs.calls {
		if n > 128 || n == 0 {
			t.Fatalf("call %d read %d nodes", i, n)
		}
	}
	if len(cs.calls) != 17 {
		t.Fatalf("%d store calls for 17 nodes", len(cs.calls))
	}
}

// inclusionCases lists (index, size) pairs: every pair up to size 64, and
// indices around powers of two and tile edges for larger sizes.
func inclusionCases(maxSize uint64) [][2]uint64 {
	var out [][2]uint64
	for size := uint64(1); size <= 64; size++ {
		for i := uint64(0); i < size; i++ {
			out = append(out, [2]uint64{i, size})
		}
	}
	edges := []uint64{0, 1, 2, 63, 64, 65, 127, 128, 129, 254, 255, 256, 257, 300, 510, 511, 512, 513, 767, 768, 998, 999,
		32767, 32768, 65534, 65535, 65536}
	for _, size := range []uint64{65, 100, 127, 128, 129, 255, 256, 257, 300, 511, 512, 513, 768, 999, 1000, 65535, 65536, 65537} {
		if size > maxSize {
			continue
		}
		for _, i := range edges {
			if i < size {
				out = append(out, [2]uint64{i, size})
			}
		}
		out = append(out, [2]uint64{size / 2, size}, [2]uint64{size / 3, size})
	}
	return out
}

func checkInclusion(t *testing.T, st NodeStore, ref *refTree, index, size uint64) {
	t.Helper()
	got, err := Inclusion(ctx, st, index, size)
	if err != nil {
		t.Fatalf("Inclusion(%d, %d): %v", index, size, err)
	}
	if want := ref.path(index, 0, size); !equalHashes(got, want) {
		t.Fatalf("Inclusion(%d, %d) has %d hashes, differs from the RFC 6962 PATH (%d hashes)", index, size, len(got), len(want))
	}
	root := ref.mth(0, size)
	if err := merkleproof.VerifyInclusion(segment.Blake3RFC6962, index, size, ref.leaves[index], got, root); err != nil {
		t.Fatalf("VerifyInclusion(%d, %d): %v", index, size, err)
	}
}

func TestInclusionSmall(t *testing.T) {
	st, ref := small(t)
	smallMu.Lock()
	defer smallMu.Unlock()
	for _, c := range inclusionCases(st.Size()) {
		checkInclusion(t, st, ref, c[0], c[1])
	}
}

func TestInclusionBig(t *testing.T) {
	st, ref := big(t)
	for _, c := range inclusionCases(st.Size()) {
		if c[1] > 1000 {
			checkInclusion(t, st, ref, c[0], c[1])
		}
	}
}

// consistencyCases lists (size1, size2) pairs: every pair up to 48 and pairs
// of sizes around powers of two and tile edges.
func consistencyCases(maxSize uint64) [][2]uint64 {
	var out [][2]uint64
	for s2 := uint64(0); s2 <= 48; s2++ {
		for s1 := uint64(0); s1 <= s2; s1++ {
			out = append(out, [2]uint64{s1, s2})
		}
	}
	sizes := []uint64{0, 1, 2, 3, 7, 8, 9, 100, 127, 128, 129, 255, 256, 257, 300, 511, 512, 513, 999, 1000,
		32768, 65535, 65536, 65537}
	for _, s1 := range sizes {
		for _, s2 := range sizes {
			if s1 <= s2 && s2 <= maxSize && s2 > 48 {
				out = append(out, [2]uint64{s1, s2})
			}
		}
	}
	return out
}

func checkConsistency(t *testing.T, st NodeStore, ref *refTree, s1, s2 uint64) {
	t.Helper()
	got, err := Consistency(ctx, st, s1, s2)
	if err != nil {
		t.Fatalf("Consistency(%d, %d): %v", s1, s2, err)
	}
	if got == nil {
		t.Fatalf("Consistency(%d, %d) = nil, want a non-nil slice", s1, s2)
	}
	if want := ref.consistency(s1, s2); !equalHashes(got, want) {
		t.Fatalf("Consistency(%d, %d) has %d hashes, differs from the RFC 6962 PROOF (%d hashes)", s1, s2, len(got), len(want))
	}
	if err := merkleproof.VerifyConsistency(segment.Blake3RFC6962, s1, s2, got, ref.mth(0, s1), ref.mth(0, s2)); err != nil {
		t.Fatalf("VerifyConsistency(%d, %d): %v", s1, s2, err)
	}
}

func TestConsistencySmall(t *testing.T) {
	st, ref := small(t)
	smallMu.Lock()
	defer smallMu.Unlock()
	for _, c := range consistencyCases(st.Size()) {
		checkConsistency(t, st, ref, c[0], c[1])
	}
}

func TestConsistencyBig(t *testing.T) {
	st, ref := big(t)
	for _, c := range consistencyCases(st.Size()) {
		if c[1] > 1000 {
			checkConsistency(t, st, ref, c[0], c[1])
		}
	}
}

// flips calls f with a copy of b that has one bit of byte i flipped, for
// every i.
func flips(b []byte, f func(i int, changed []byte)) {
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		f(i, c)
	}
}

func TestInclusionFailsOnAnyChangedByte(t *testing.T) {
	st, ref := big(t)
	h := segment.Blake3RFC6962
	for _, c := range [][2]uint64{{0, 1}, {5, 6}, {255, 257}, {256, 65537}, {65536, 65537}, {1000, 65535}} {
		index, size := c[0], c[1]
		path, err := Inclusion(ctx, st, index, size)
		if err != nil {
			t.Fatal(err)
		}
		leaf, root := ref.leaves[index], ref.mth(0, size)
		if err := merkleproof.VerifyInclusion(h, index, size, leaf, path, root); err != nil {
			t.Fatalf("(%d, %d): %v", index, size, err)
		}
		for j := range path {
			flips(path[j], func(i int, changed []byte) {
				p := append([][]byte(nil), path...)
				p[j] = changed
				if merkleproof.VerifyInclusion(h, index, size, leaf, p, root) == nil {
					t.Fatalf("(%d, %d): proof hash %d byte %d changed and it still verifies", index, size, j, i)
				}
			})
		}
		flips(leaf, func(i int, changed []byte) {
			if merkleproof.VerifyInclusion(h, index, size, changed, path, root) == nil {
				t.Fatalf("(%d, %d): leaf byte %d changed and it still verifies", index, size, i)
			}
		})
		flips(root, func(i int, changed []byte) {
			if merkleproof.VerifyInclusion(h, index, size, leaf, path, changed) == nil {
				t.Fatalf("(%d, %d): root byte %d changed and it still verifies", index, size, i)
			}
		})
	}
}

func TestConsistencyFailsOnAnyChangedByte(t *testing.T) {
	st, ref := big(t)
	h := segment.Blake3RFC6962
	for _, c := range [][2]uint64{{1, 2}, {3, 7}, {255, 257}, {256, 65537}, {65535, 65536}, {1000, 65537}} {
		s1, s2 := c[0], c[1]
		path, err := Consistency(ctx, st, s1, s2)
		if err != nil {
			t.Fatal(err)
		}
		r1, r2 := ref.mth(0, s1), ref.mth(0, s2)
		if err := merkleproof.VerifyConsistency(h, s1, s2, path, r1, r2); err != nil {
			t.Fatalf("(%d, %d): %v", s1, s2, err)
		}
		for j := range path {
			flips(path[j], func(i int, changed []byte) {
				p := append([][]byte(nil), path...)
				p[j] = changed
				if merkleproof.VerifyConsistency(h, s1, s2, p, r1, r2) == nil {
					t.Fatalf("(%d, %d): proof hash %d byte %d changed and it still verifies", s1, s2, j, i)
				}
			})
		}
		flips(r1, func(i int, changed []byte) {
			if merkleproof.VerifyConsistency(h, s1, s2, path, changed, r2) == nil {
				t.Fatalf("(%d, %d): old root byte %d changed and it still verifies", s1, s2, i)
			}
		})
		flips(r2, func(i int, changed []byte) {
			if merkleproof.VerifyConsistency(h, s1, s2, path, r1, changed) == nil {
				t.Fatalf("(%d, %d): new root byte %d changed and it still verifies", s1, s2, i)
			}
		})
	}
}

func TestBadArguments(t *testing.T) {
	st, _ := small(t) // 1000 leaves
	cases := []struct {
		name string
		run  func() error
		code errs.Code
	}{
		{"inclusion index == size", func() error { _, err := Inclusion(ctx, st, 5, 5); return err }, errs.CodeDependencyMissing},
		{"inclusion index > size", func() error { _, err := Inclusion(ctx, st, 9, 5); return err }, errs.CodeDependencyMissing},
		{"inclusion size 0", func() error { _, err := Inclusion(ctx, st, 0, 0); return err }, errs.CodeDependencyMissing},
		{"inclusion size beyond tree", func() error { _, err := Inclusion(ctx, st, 3, 1001); return err }, errs.CodeDependencyMissing},
		{"inclusion size far beyond tree", func() error { _, err := Inclusion(ctx, st, 3, 1<<40); return err }, errs.CodeDependencyMissing},
		{"inclusion max size", func() error { _, err := Inclusion(ctx, st, 0, ^uint64(0)); return err }, errs.CodeDependencyMissing},
		{"consistency reversed", func() error { _, err := Consistency(ctx, st, 10, 9); return err }, errs.CodeInvalidInput},
		{"consistency beyond tree", func() error { _, err := Consistency(ctx, st, 10, 1001); return err }, errs.CodeDependencyMissing},
		{"consistency equal beyond tree", func() error { _, err := Consistency(ctx, st, 1001, 1001); return err }, errs.CodeDependencyMissing},
		{"consistency from 0 beyond tree", func() error { _, err := Consistency(ctx, st, 0, 5000); return err }, errs.CodeDependencyMissing},
		{"consistency max", func() error { _, err := Consistency(ctx, st, 1, ^uint64(0)); return err }, errs.CodeDependencyMissing},
		{"root beyond tree", func() error { _, err := RootAt(ctx, st, 1001); return err }, errs.CodeDependencyMissing},
		{"root max", func() error { _, err := RootAt(ctx, st, ^uint64(0)); return err }, errs.CodeDependencyMissing},
		{"load range beyond tree", func() error { _, err := LoadRange(ctx, st, 1024); return err }, errs.CodeDependencyMissing},
		{"node level too high", func() error { _, err := NodeHash(ctx, st, compact.NewNodeID(64, 0)); return err }, errs.CodeInvalidInput},
		{"node beyond 2^64", func() error { _, err := NodeHash(ctx, st, compact.NewNodeID(0, ^uint64(0))); return err }, errs.CodeInvalidInput},
		{"node beyond 2^64 at level 63", func() error { _, err := NodeHash(ctx, st, compact.NewNodeID(63, 1)); return err }, errs.CodeInvalidInput},
		{"node level 63 beyond tree", func() error { _, err := NodeHash(ctx, st, compact.NewNodeID(63, 0)); return err }, errs.CodeDependencyMissing},
		{"node beyond tree", func() error { _, err := NodeHash(ctx, st, compact.NewNodeID(3, 125)); return err }, errs.CodeDependencyMissing},
		{"memstore unstored level", func() error { _, err := st.Nodes(ctx, 3, 0, 1); return err }, errs.CodeInvalidInput},
		{"memstore reversed range", func() error { _, err := st.Nodes(ctx, 0, 2, 1); return err }, errs.CodeInvalidInput},
		{"memstore short leaf", func() error { return NewMemStore().AppendLeafHash(make([]byte, 31)) }, errs.CodeInvalidInput},
		{"prove seq 0", func() error { _, err := ProveInclusion(ctx, st, "a", 0, 5, recordHash(0)); return err }, errs.CodeInvalidInput},
		{"prove seq > size", func() error { _, err := ProveInclusion(ctx, st, "a", 6, 5, recordHash(5)); return err }, errs.CodeDependencyMissing},
		{"prove seq beyond tree", func() error { _, err := ProveInclusion(ctx, st, "a", 1001, 1001, recordHash(1000)); return err }, errs.CodeDependencyMissing},
		{"prove wrong record hash", func() error { _, err := ProveInclusion(ctx, st, "a", 3, 5, recordHash(3)); return err }, errs.CodeIndexMismatch},
		{"prove bad anchor", func() error { _, err := ProveInclusion(ctx, st, "", 1, 5, recordHash(0)); return err }, errs.CodeInvalidInput},
		{"prove consistency reversed", func() error { _, err := ProveConsistency(ctx, st, "a", 5, 4); return err }, errs.CodeInvalidInput},
		{"prove consistency beyond", func() error { _, err := ProveConsistency(ctx, st, "a", 5, 4000); return err }, errs.CodeDependencyMissing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			testutil.WantCode(t, c.run(), c.code)
		})
	}
}

func TestContextCancelled(t *testing.T) {
	st, _ := small(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Inclusion(cctx, st, 3, 900); !errors.Is(err, context.Canceled) {
		t.Fatalf("Inclusion with a cancelled context: %v", err)
	}
	if _, err := RootAt(cctx, st, 900); !errors.Is(err, context.Canceled) {
		t.Fatalf("RootAt with a cancelled context: %v", err)
	}
}

// badStore breaks the NodeStore contract in one way.
type badStore struct {
	NodeStore
	short, longer, badLen bool
}

func (b badStore) Nodes(ctx context.Context, level uint, begin, end uint64) ([][]byte, error) {
	hs, err := b.NodeStore.Nodes(ctx, level, begin, end)
	if err != nil || len(hs) == 0 {
		return hs, err
	}
	switch {
	case b.short:
		return hs[:len(hs)-1], nil
	case b.longer:
		return append(hs, hs[0]), nil
	case b.badLen:
		hs[0] = hs[0][:31]
	}
	return hs, nil
}

func TestStoreContractViolations(t *testing.T) {
	st, _ := small(t)
	for _, c := range []struct {
		store badStore
		code  errs.Code
	}{
		{badStore{NodeStore: st, short: true}, errs.CodeDependencyMissing},
		{badStore{NodeStore: st, longer: true}, errs.CodeIndexMismatch},
		{badStore{NodeStore: st, badLen: true}, errs.CodeIndexMismatch},
	} {
		_, err := Inclusion(ctx, c.store, 7, 300)
		testutil.WantCode(t, err, c.code)
		_, err = RootAt(ctx, c.store, 300)
		testutil.WantCode(t, err, c.code)
	}
}

func TestProveInclusionAndConsistency(t *testing.T) {
	st, ref := small(t)
	smallMu.Lock()
	defer smallMu.Unlock()
	for _, c := range [][2]uint64{{1, 1}, {1, 3}, {7, 100}, {256, 257}, {1000, 1000}} {
		seq, size := c[0], c[1]
		p, err := ProveInclusion(ctx, st, "dev-1", seq, size, recordHash(seq-1))
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.mth(0, size); string(p.Root[:]) != string(want) {
			t.Fatalf("seq %d size %d: root %s, reference %x", seq, size, p.Root, want)
		}
		if p.Leaf != recordHash(seq-1) || p.Seq != seq || p.Size != size || p.Anchor != "dev-1" {
			t.Fatalf("seq %d size %d: proof fields %+v", seq, size, p)
		}
		if err := VerifyInclusionProof(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range [][2]uint64{{0, 0}, {0, 5}, {1, 3}, {5, 5}, {255, 1000}} {
		p, err := ProveConsistency(ctx, st, "dev-1", c[0], c[1])
		if err != nil {
			t.Fatal(err)
		}
		if string(p.OldRoot[:]) != string(ref.mth(0, c[0])) || string(p.NewRoot[:]) != string(ref.mth(0, c[1])) {
			t.Fatalf("%v: roots differ from the reference", c)
		}
		if err := VerifyConsistencyProof(p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadRangeContinues(t *testing.T) {
	st, ref := small(t)
	smallMu.Lock()
	defer smallMu.Unlock()
	for _, size := range []uint64{0, 1, 255, 256, 257, 600} {
		r, err := LoadRange(ctx, st, size)
		if err != nil {
			t.Fatal(err)
		}
		for i := size; i < size+300; i++ {
			if err := r.Append(ref.leaves[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		root, err := r.GetRootHash(nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.mth(0, size+300); string(root) != string(want) {
			t.Fatalf("range loaded at %d and extended to %d: root %x, reference %x", size, size+300, root, want)
		}
	}
}

// TestAppendVisitor pins down the compact.Range behaviour the engine relies
// on: Append reports the leaf, then every perfect-subtree node it completes,
// bottom-up, each exactly once, and nothing else.
func TestAppendVisitor(t *testing.T) {
	const n = 1 << 10
	r := NewRange()
	seen := map[compact.NodeID]int{}
	for i := uint64(0); i < n; i++ {
		var got []compact.NodeID
		if err := r.Append(cheapLeaf(i), func(id compact.NodeID, hash []byte) {
			got = append(got, id)
			seen[id]++
			if len(hash) != segment.HashSize {
				t.Fatalf("node %+v: %d-byte hash", id, len(hash))
			}
		}); err != nil {
			t.Fatal(err)
		}
		// Leaf i completes the nodes {l, i>>l} for l = 0 … trailing ones of i.
		var want []compact.NodeID
		for l := uint(0); l == 0 || (i+1)%(1<<l) == 0; l++ {
			want = append(want, compact.NewNodeID(l, i>>l))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("append %d reported %v, want %v", i, got, want)
		}
	}
	total := 0
	for id, c := range seen {
		lo, hi := id.Coverage()
		if c != 1 || hi > n || lo >= hi {
			t.Fatalf("node %+v reported %d times", id, c)
		}
		total++
	}
	if total != 2*n-1 {
		t.Fatalf("%d distinct nodes for %d leaves, want %d", total, n, 2*n-1)
	}
}

func TestStoredLevels(t *testing.T) {
	var stored []uint
	for l := uint(0); l <= 70; l++ {
		if StoredLevel(l) {
			stored = append(stored, l)
		}
	}
	if fmt.Sprint(stored) != "[0 8 16 24 32 40 48 56]" {
		t.Fatalf("stored levels %v", stored)
	}
	var put []compact.NodeID
	v := VisitStored(func(id compact.NodeID, _ []byte) { put = append(put, id) })
	r := NewRange()
	for i := uint64(0); i < 512; i++ {
		if err := r.Append(cheapLeaf(i), v); err != nil {
			t.Fatal(err)
		}
	}
	levels := map[uint]int{}
	for _, id := range put {
		levels[id.Level]++
	}
	if len(levels) != 2 || levels[0] != 512 || levels[8] != 2 {
		t.Fatalf("VisitStored kept %v", levels)
	}
	// The store's level 8 is exactly what the visitor reported.
	st, _ := buildCheap(t, 512)
	hs, err := st.Nodes(ctx, 8, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	ids := []compact.NodeID{compact.NewNodeID(8, 0), compact.NewNodeID(8, 1)}
	for i, id := range ids {
		want, err := NodeHash(ctx, st, compact.NewNodeID(7, 2*id.Index))
		if err != nil {
			t.Fatal(err)
		}
		right, err := NodeHash(ctx, st, compact.NewNodeID(7, 2*id.Index+1))
		if err != nil {
			t.Fatal(err)
		}
		if string(hs[i]) != string(segment.Blake3RFC6962.HashChildren(want, right)) {
			t.Fatalf("stored node %+v is not the hash of its children", id)
		}
	}
	if _, err := st.Nodes(ctx, 8, 0, 3); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("level 8 node 2 of a 512-leaf tree: %v", err)
	}
	if _, err := st.Nodes(ctx, 16, 0, 1); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Fatalf("level 16 of a 512-leaf tree: %v", err)
	}
}

func TestMemStoreConcurrentReads(t *testing.T) {
	st := NewMemStore()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				size := st.Size()
				if size == 0 {
					continue
				}
				if _, err := Inclusion(ctx, st, size/2, size); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := uint64(0); i < 3000; i++ {
		if err := st.AppendLeafHash(cheapLeaf(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestEveryNodeOfProofsIsStoredOrDerived(t *testing.T) {
	// Every node a proof needs is served from levels 0 and 8 only in a
	// 1000-leaf tree.
	st, _ := small(t)
	levels := map[uint]bool{}
	rec := recordingStore{NodeStore: st, levels: levels}
	for _, c := range inclusionCases(1000) {
		if _, err := Inclusion(ctx, rec, c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	for l := range levels {
		got = append(got, int(l))
	}
	sort.Ints(got)
	if fmt.Sprint(got) != "[0 8]" {
		t.Fatalf("levels read: %v", got)
	}
}

type recordingStore struct {
	NodeStore
	levels map[uint]bool
}

func (r recordingStore) Nodes(ctx context.Context, level uint, begin, end uint64) ([][]byte, error) {
	r.levels[level] = true
	return r.NodeStore.Nodes(ctx, level, begin, end)
}

func TestReturnedHashesAreTheCallers(t *testing.T) {
	st, _ := buildCheap(t, 512)
	// The proof of leaf 0 at 512 holds the stored node {8, 1} as is.
	p1, err := Inclusion(ctx, st, 0, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range p1 {
		h[0] ^= 0xff
	}
	p2, err := Inclusion(ctx, st, 0, 512)
	if err != nil {
		t.Fatal(err)
	}
	for i := range p2 {
		if p2[i][0] == p1[i][0] {
			t.Fatalf("editing proof hash %d changed the store", i)
		}
	}
}
