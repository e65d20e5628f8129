package proof_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// A store fed record by record, an inclusion proof as CONTRACT §10 JSON, and its
// offline verification.
func Example() {
	ctx := context.Background()
	st := proof.NewMemStore()
	var hashes []segment.Hash
	for i := 0; i < 3; i++ {
		h := segment.Hash(blake3.Sum256([]byte(fmt.Sprint("record ", i))))
		hashes = append(hashes, h)
		if err := st.Append(h); err != nil {
			panic(err)
		}
	}
	p, err := proof.ProveInclusion(ctx, st, "dev-1", 1, 3, hashes[0])
	if err != nil {
		panic(err)
	}
	data, _ := json.Marshal(p)
	v, err := proof.VerifyJSON(data)
	fmt.Println(v.Kind, len(p.Proof), p.Root == st.Root(), err)

	c, err := proof.NewCheckpoint("example", time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC),
		[]proof.Entry{{Anchor: "dev-1", Size: st.Size(), Root: st.Root()}})
	if err != nil {
		panic(err)
	}
	fp, _ := c.ProveAnchor("dev-1")
	fmt.Println(c.VerifyAnchorProof(fp))
	// Output:
	// inclusion 2 true <nil>
	// <nil>
}
