package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/transparency-dev/merkle/compact"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// TestEngineProofs: inclusion and consistency proofs from a real engine, at
// tree sizes around the stored levels (255/256/257 and 65535–65537), verify
// with transparency-dev/merkle's proof package and the BLAKE3 hasher alone,
// against roots computed here from the receipts with compact.Range — and
// stop verifying when any byte changes.
func TestEngineProofs(t *testing.T) {
	ctx := context.Background()
	const n = 65537 + 3
	db, err := Open(t.TempDir(), Options{NoSync: true, SegmentSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var hashes []segment.Hash
	batch := make([]Entry, 0, 1000)
	for i := 0; i < n; i++ {
		batch = append(batch, Entry{Anchor: "big", Type: "EV", Value: []byte(fmt.Sprint(i))})
		if len(batch) == cap(batch) || i == n-1 {
			rs, err := db.AppendBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				hashes = append(hashes, r.Hash)
			}
			batch = batch[:0]
		}
	}
	// Reference roots, independent of the engine's index.
	sizes := []uint64{1, 2, 3, 7, 255, 256, 257, 511, 65535, 65536, 65537, n}
	roots := map[uint64][]byte{}
	rf := &compact.RangeFactory{Hash: segment.Blake3RFC6962.HashChildren}
	r := rf.NewEmptyRange(0)
	for i, h := range hashes {
		if err := r.Append(segment.Blake3RFC6962.HashLeaf(h[:]), nil); err != nil {
			t.Fatal(err)
		}
		for _, s := range sizes {
			if uint64(i+1) == s {
				roots[s], _ = r.GetRootHash(nil)
			}
		}
	}
	h := segment.Blake3RFC6962
	for _, size := range sizes {
		root, got, err := db.AnchorRoot(ctx, "big", size)
		if err != nil || got != size || string(root[:]) != string(roots[size]) {
			t.Fatalf("root at %d: %s (size %d) %v, want %x", size, root, got, err, roots[size])
		}
		for _, seq := range []uint64{1, 2, size / 2, 255, 256, 257, 65535, 65536, 65537, size - 1, size} {
			if seq < 1 || seq > size {
				continue
			}
			p, err := db.ProveInclusion(ctx, "big", seq, size)
			if err != nil {
				t.Fatalf("inclusion of %d at %d: %v", seq, size, err)
			}
			if p.Leaf != hashes[seq-1] || p.Size != size || string(p.Root[:]) != string(roots[size]) {
				t.Fatalf("inclusion of %d at %d: %+v", seq, size, p)
			}
			leaf := h.HashLeaf(p.Leaf[:])
			path := raw(p.Proof)
			if err := merkleproof.VerifyInclusion(h, seq-1, size, leaf, path, roots[size]); err != nil {
				t.Fatalf("inclusion of %d at %d does not verify: %v", seq, size, err)
			}
			for i := range path {
				bad := raw(p.Proof)
				bad[i][i%32] ^= 1
				if merkleproof.VerifyInclusion(h, seq-1, size, leaf, bad, roots[size]) == nil {
					t.Fatalf("inclusion of %d at %d verifies with proof hash %d changed", seq, size, i)
				}
			}
			badLeaf := append([]byte(nil), leaf...)
			badLeaf[31] ^= 0x80
			badRoot := append([]byte(nil), roots[size]...)
			badRoot[0] ^= 1
			if merkleproof.VerifyInclusion(h, seq-1, size, badLeaf, path, roots[size]) == nil ||
				merkleproof.VerifyInclusion(h, seq-1, size, leaf, path, badRoot) == nil {
				t.Fatalf("inclusion of %d at %d verifies with the leaf or root changed", seq, size)
			}
		}
		for _, old := range sizes {
			if old > size {
				continue
			}
			p, err := db.ProveConsistency(ctx, "big", old, size)
			if err != nil {
				t.Fatalf("consistency %d→%d: %v", old, size, err)
			}
			if string(p.OldRoot[:]) != string(roots[old]) || string(p.NewRoot[:]) != string(roots[size]) {
				t.Fatalf("consistency %d→%d roots %s %s", old, size, p.OldRoot, p.NewRoot)
			}
			path := raw(p.Proof)
			if err := merkleproof.VerifyConsistency(h, old, size, path, roots[old], roots[size]); err != nil {
				t.Fatalf("consistency %d→%d does not verify: %v", old, size, err)
			}
			for i := range path {
				bad := raw(p.Proof)
				bad[i][31-i%32] ^= 4
				if merkleproof.VerifyConsistency(h, old, size, bad, roots[old], roots[size]) == nil {
					t.Fatalf("consistency %d→%d verifies with proof hash %d changed", old, size, i)
				}
			}
			if old != size {
				badOld := append([]byte(nil), roots[old]...)
				badOld[5] ^= 1
				if merkleproof.VerifyConsistency(h, old, size, path, badOld, roots[size]) == nil {
					t.Fatalf("consistency %d→%d verifies with the old root changed", old, size)
				}
			}
		}
	}
	// The current size by default, and refusals.
	if p, err := db.ProveInclusion(ctx, "big", 5, 0); err != nil || p.Size != n {
		t.Fatalf("size 0: %+v %v", p, err)
	}
	for _, c := range []struct {
		seq, size uint64
		code      errs.Code
	}{{0, 5, errs.CodeInvalidInput}, {6, 5, errs.CodeDependencyMissing}, {1, n + 1, errs.CodeDependencyMissing}} {
		if _, err := db.ProveInclusion(ctx, "big", c.seq, c.size); errs.CodeOf(err) != c.code {
			t.Errorf("inclusion of %d at %d: %v, want %s", c.seq, c.size, err, c.code)
		}
	}
	if _, err := db.ProveConsistency(ctx, "big", 9, 8); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Errorf("consistency backwards: %v", err)
	}
	if _, err := db.ProveConsistency(ctx, "nope", 1, 2); errs.CodeOf(err) != errs.CodeDependencyMissing {
		t.Errorf("unknown anchor: %v", err)
	}
	// What the engine returns also passes the proof package's JSON check.
	p, _ := db.ProveInclusion(ctx, "big", 300, 65536)
	b, _ := p.MarshalJSON()
	if _, err := proof.VerifyJSON(b); err != nil {
		t.Fatalf("VerifyJSON: %v", err)
	}
}

func raw(hs []segment.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = append([]byte(nil), hs[i][:]...)
	}
	return out
}

// TestProveInclusionOfTruncatedRecords: a record whose segment a compaction
// removed (and of which no copy was kept) is still provable: its index row
// holds its hash, and the proof checks against the root the anchor had
// before the cut, with the leaf it had then.
func TestProveInclusionOfTruncatedRecords(t *testing.T) {
	ctx := context.Background()
	db, err := Open("db", fixtureOptions(vfs.NewMem()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A few keys written over and over: each truncated segment keeps a
	// copy of only its last version of each, the rest is gone.
	for i := 0; i < 400; i++ {
		if _, err := db.Put(ctx, fmt.Sprintf("a%d", i%2), []byte(fmt.Sprintf("k%d", i%3)), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	type before struct {
		size   uint64
		root   segment.Hash
		hashes []segment.Hash
	}
	was := map[string]before{}
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		var b before
		for rec, err := range db.Log(ctx, info.ID, 1, 0) {
			if err != nil {
				t.Fatal(err)
			}
			b.hashes = append(b.hashes, rec.Hash)
		}
		root, size, err := db.AnchorRoot(ctx, info.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		b.root, b.size = root, size
		was[info.ID] = b
	}
	for i := 0; i < 2; i++ {
		if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
			t.Fatal(err)
		}
	}
	truncated := 0
	for anchor, b := range was {
		first, err := db.firstPresent(anchor)
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= b.size; seq++ {
			if _, err := db.Record(ctx, anchor, seq); errs.CodeOf(err) == errs.CodeDependencyMissing {
				truncated++
			} else if err != nil {
				t.Fatalf("record %s seq %d: %v", anchor, seq, err)
			}
			p, err := db.ProveInclusion(ctx, anchor, seq, b.size)
			if err != nil {
				t.Fatalf("prove %s seq %d (log starts at %d): %v", anchor, seq, first, err)
			}
			if p.Leaf != b.hashes[seq-1] || p.Root != b.root {
				t.Fatalf("prove %s seq %d: leaf %s root %s, want %s and %s", anchor, seq, p.Leaf, p.Root, b.hashes[seq-1], b.root)
			}
			if err := proof.VerifyInclusionProof(p); err != nil {
				t.Fatalf("prove %s seq %d: %v", anchor, seq, err)
			}
		}
	}
	if truncated < 100 {
		t.Fatalf("only %d records are gone with no copy kept: the test proves too little", truncated)
	}
}
