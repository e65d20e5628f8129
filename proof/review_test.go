package proof

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// A proof file with a null among its path hashes is not a proof (FORMAT
// §10.4: decoders refuse nulls), so verify-proof must say INPUT_001 (exit
// 2). encoding/json leaves a null element of a []segment.Hash as the zero
// hash, so the file decoded and failed as a proof that does not verify
// (INT_001, exit 1).
func TestReviewProofPathNull(t *testing.T) {
	ctx := context.Background()
	st := NewMemStore()
	for i := 0; i < 5; i++ {
		var h segment.Hash
		h[0] = byte(i + 1)
		if err := st.Append(h); err != nil {
			t.Fatal(err)
		}
	}
	var leaf segment.Hash
	leaf[0] = 3
	inc, err := ProveInclusion(ctx, st, "a", 3, 5, leaf)
	if err != nil {
		t.Fatal(err)
	}
	con, err := ProveConsistency(ctx, st, "a", 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]any{"inclusion": inc, "consistency": con} {
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		m["proof"] = append(m["proof"].([]any), nil)
		data, _ = json.Marshal(m)
		if _, err := VerifyJSON(data); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%s proof with a null path hash: %v, want INPUT_001", name, err)
		}
		m["proof"] = []any{nil}
		data, _ = json.Marshal(m)
		if _, err := VerifyJSON(data); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%s proof whose path is [null]: %v, want INPUT_001", name, err)
		}
	}
}
