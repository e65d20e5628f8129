package merge

import (
	"context"
	"fmt"
	"math/bits"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// refRoot is RFC 6962 §2.1 MTH written out: split at the largest power of two
// below n.
func refRoot(hashes []segment.Hash) segment.Hash {
	switch len(hashes) {
	case 0:
		return blake3.Sum256(nil)
	case 1:
		return blake3.Sum256(append([]byte{0}, hashes[0][:]...))
	}
	k := 1 << (bits.Len(uint(len(hashes)-1)) - 1)
	l, r := refRoot(hashes[:k]), refRoot(hashes[k:])
	return blake3.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

func TestRootBuilderMatchesRFC6962(t *testing.T) {
	var hashes []segment.Hash
	b := NewRootBuilder()
	for n := 0; n <= 70; n++ {
		if got, want := b.Root(), refRoot(hashes); got != want || b.Size() != uint64(n) {
			t.Fatalf("size %d: root %s, want %s", n, got, want)
		}
		h := blake3.Sum256([]byte(fmt.Sprint(n)))
		hashes = append(hashes, h)
		b.Append(h)
	}
}

func TestRootOverMerge(t *testing.T) {
	logs := [][]segment.Record{
		makeLog("b", 1, []uint64{1, 4, 6}),
		makeLog("a", 1, []uint64{1, 2, 6, 9}),
	}
	var hashes []segment.Hash
	for _, r := range reference(logs) {
		hashes = append(hashes, r.Hash)
	}
	root, n, err := Root(Merge(context.Background(), sources(logs)))
	if err != nil || n != 7 || root != refRoot(hashes) {
		t.Fatalf("Root = %s, %d, %v; want %s, 7", root, n, err, refRoot(hashes))
	}
	// Source order does not matter.
	root2, _, _ := Root(Merge(context.Background(), sources([][]segment.Record{logs[1], logs[0]})))
	if root2 != root {
		t.Fatal("merged root depends on source order")
	}
	// A single anchor's merged root is its tree root.
	one, _, _ := Root(Merge(context.Background(), sources(logs[:1])))
	if one != refRoot([]segment.Hash{logs[0][0].Hash, logs[0][1].Hash, logs[0][2].Hash}) {
		t.Fatal("single-anchor merged root differs from the anchor root")
	}
	if _, _, err := Root(Merge(context.Background(), sources(logs), WithFrom(2))); errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("root over a partial stream: %v", err)
	}
}
