package proof

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
)

// verifiedOf round-trips p through its JSON and VerifyJSON, as verify-proof
// does with a file.
func verifiedOf(t *testing.T, p any) Verified {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := VerifyJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return v
}

// TestBindToCheckpoint: a proof binds to a signed checkpoint only when it is
// about the tree (or frontier) the checkpoint lists; a proof that verifies
// against its own root but another size, tree or frontier is INT_001.
func TestBindToCheckpoint(t *testing.T) {
	ctx := context.Background()
	c, stores := sampleCheckpoint(t)
	skey, vkey, _ := GenerateKeys("k")
	msg, err := Sign(c.Marshal(), skey)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := OpenCheckpoint(msg, vkey)
	if err != nil {
		t.Fatal(err)
	}
	id := trickyIDs[3] // 21 records
	st := stores[id]
	n := st.Size()
	first := recordHash(uint64(indexOf(id) * 1000))

	bound := func(what string, p any) {
		t.Helper()
		if err := cp.Bind(verifiedOf(t, p)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	refused := func(what string, p any) {
		t.Helper()
		err := cp.Bind(verifiedOf(t, p))
		testutil.WantCode(t, err, errs.CodeHashMismatch)
		t.Logf("%s: %v", what, err)
	}

	ip, err := ProveInclusion(ctx, st, id, 1, n, first)
	if err != nil {
		t.Fatal(err)
	}
	bound("inclusion at the checkpoint's size", ip)
	ip, err = ProveInclusion(ctx, st, id, 1, n-1, first)
	if err != nil {
		t.Fatal(err)
	}
	refused("inclusion in an older tree", ip)
	other := NewMemStore()
	for i := uint64(0); i < n; i++ {
		if err := other.Append(recordHash(900000 + i)); err != nil {
			t.Fatal(err)
		}
	}
	ip, err = ProveInclusion(ctx, other, id, 1, n, recordHash(900000))
	if err != nil {
		t.Fatal(err)
	}
	refused("inclusion in a fork of the same size", ip)
	ip.Anchor = "not listed"
	refused("inclusion for an anchor the checkpoint does not list", ip)

	cons, err := ProveConsistency(ctx, st, id, 5, n)
	if err != nil {
		t.Fatal(err)
	}
	bound("consistency ending at the checkpoint", cons)
	grown := NewMemStore()
	for i := uint64(0); i < n; i++ {
		if err := grown.Append(recordHash(uint64(indexOf(id)*1000) + i)); err != nil {
			t.Fatal(err)
		}
	}
	if grown.Root() != st.Root() {
		t.Fatal("the rebuilt tree differs")
	}
	for i := uint64(0); i < 9; i++ {
		if err := grown.Append(recordHash(800000 + i)); err != nil {
			t.Fatal(err)
		}
	}
	cons, err = ProveConsistency(ctx, grown, id, n, n+9)
	if err != nil {
		t.Fatal(err)
	}
	bound("consistency starting at the checkpoint", cons)
	cons, err = ProveConsistency(ctx, grown, id, 5, n+9)
	if err != nil {
		t.Fatal(err)
	}
	refused("consistency with neither end at the checkpoint", cons)

	fp, err := c.ProveAnchor(id)
	if err != nil {
		t.Fatal(err)
	}
	bound("frontier inclusion", fp)
	small, err := NewCheckpoint("db-1", testTime, []Entry{{Anchor: id, Size: n, Root: st.Root()}})
	if err != nil {
		t.Fatal(err)
	}
	fp, err = small.ProveAnchor(id)
	if err != nil {
		t.Fatal(err)
	}
	refused("frontier inclusion under another checkpoint's root", fp)

	testutil.WantCode(t, cp.Bind(Verified{}), errs.CodeInvalidInput)
}
