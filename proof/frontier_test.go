package proof

import (
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// testEntries returns n sorted entries "anchor 0" … with distinct sizes and
// roots (sorted because the ids have one digit up to n = 10; larger n are
// sorted explicitly).
func testEntries(t testing.TB, n int) []Entry {
	t.Helper()
	out := make([]Entry, n)
	for i := range out {
		out[i] = Entry{Anchor: fmt.Sprintf("anchor %d", i), Size: uint64(i + 1), Root: recordHash(uint64(1000 + i))}
	}
	SortEntries(out)
	return out
}

func TestFrontierLeafEncoding(t *testing.T) {
	var root segment.Hash
	for i := range root {
		root[i] = byte(i)
	}
	leaf, err := FrontierLeaf(Entry{Anchor: "ab", Size: 0x0102030405060708, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	want := "0002" + "6162" + "0102030405060708" + hex.EncodeToString(root[:])
	if got := hex.EncodeToString(leaf); got != want {
		t.Fatalf("leaf %s, want %s", got, want)
	}
	id := string(make([]byte, 255))
	for _, bad := range []Entry{
		{Anchor: ""},
		{Anchor: "a\x00"},
		{Anchor: "a\u0085"},
		{Anchor: "\xff"},
		{Anchor: id + "x"},
		{Anchor: "a", Size: 0, Root: root}, // size 0 needs the empty root
	} {
		_, err := FrontierLeaf(bad)
		testutil.WantCode(t, err, errs.CodeInvalidInput)
	}
	if _, err := FrontierLeaf(Entry{Anchor: "a", Root: emptyRoot()}); err != nil {
		t.Fatalf("size 0 with the empty root: %v", err)
	}
}

func TestFrontierRootMatchesReference(t *testing.T) {
	for n := 0; n <= 40; n++ {
		entries := testEntries(t, n)
		leaves := make([][]byte, n)
		for i, e := range entries {
			data, err := FrontierLeaf(e)
			if err != nil {
				t.Fatal(err)
			}
			leaves[i] = refLeaf(data)
		}
		ref := newRefTree(leaves)
		root, err := FrontierRoot(entries)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.mth(0, uint64(n)); string(root[:]) != string(want) {
			t.Fatalf("%d anchors: root %s, reference %x", n, root, want)
		}
		for i, e := range entries {
			p, err := ProveFrontier(entries, e.Anchor)
			if err != nil {
				t.Fatal(err)
			}
			if p.Index != uint64(i) || p.Anchors != uint64(n) || p.Root != root || p.Size != e.Size || p.AnchorRoot != e.Root {
				t.Fatalf("proof of %q: %+v", e.Anchor, p)
			}
			if err := VerifyFrontierProof(p); err != nil {
				t.Fatalf("proof of %q among %d: %v", e.Anchor, n, err)
			}
			if err := merkleproof.VerifyInclusion(segment.Blake3RFC6962, p.Index, p.Anchors, leaves[i], fromHashes(p.Proof), root[:]); err != nil {
				t.Fatalf("merkle rejects the proof of %q among %d: %v", e.Anchor, n, err)
			}
		}
	}
}

func TestFrontierOrderIsRawBytes(t *testing.T) {
	// "Z" < "a" < "Ä" (0xC3 0x84) < "中" (0xE4 …) in byte order.
	entries := []Entry{
		{Anchor: "中", Size: 1, Root: recordHash(1)},
		{Anchor: "a", Size: 1, Root: recordHash(2)},
		{Anchor: "Ä", Size: 1, Root: recordHash(3)},
		{Anchor: "Z", Size: 1, Root: recordHash(4)},
	}
	SortEntries(entries)
	var got []string
	for _, e := range entries {
		got = append(got, e.Anchor)
	}
	if fmt.Sprint(got) != "[Z a Ä 中]" {
		t.Fatalf("sorted %v", got)
	}
	if _, err := FrontierRoot(entries); err != nil {
		t.Fatal(err)
	}
}

func TestFrontierRejects(t *testing.T) {
	e := testEntries(t, 3)
	unsorted := []Entry{e[1], e[0], e[2]}
	dup := []Entry{e[0], e[1], e[1]}
	for name, entries := range map[string][]Entry{"unsorted": unsorted, "duplicate": dup, "bad id": {{Anchor: "a\tb", Size: 1}}} {
		_, err := FrontierRoot(entries)
		testutil.WantCode(t, err, errs.CodeInvalidInput)
		_, err = ProveFrontier(entries, e[0].Anchor)
		testutil.WantCode(t, err, errs.CodeInvalidInput)
		if name != "bad id" {
			_, err = NewCheckpoint("db", testTime, entries)
			if name == "unsorted" && err != nil {
				t.Fatalf("NewCheckpoint sorts its entries: %v", err)
			}
			if name == "duplicate" {
				testutil.WantCode(t, err, errs.CodeInvalidInput)
			}
		}
	}
	_, err := ProveFrontier(e, "anchor 9")
	testutil.WantCode(t, err, errs.CodeDependencyMissing)
	_, err = ProveFrontier(nil, "a")
	testutil.WantCode(t, err, errs.CodeDependencyMissing)
	if root, err := FrontierRoot(nil); err != nil || root != emptyRoot() {
		t.Fatalf("empty frontier root %s, %v", root, err)
	}
}
