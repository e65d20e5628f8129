package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A rate-limit refusal carries the capacity state like the bound refusals
// (DESIGN.md, "Admission": every refusal does); CAP_003 came back with
// zero bounds, which the CLI then left out of its JSON.
func TestRateLimitRefusalCarriesCapacityState(t *testing.T) {
	clk := newFakeClock()
	db := mustOpen(t, vfs.NewMem(), Options{AnchorRate: 1, AnchorBurst: 1, Clock: clk.now})
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Put(ctx, "dev", []byte("k1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	_, err := db.Put(ctx, "dev", []byte("k2"), []byte("v"))
	var re *RefusalError
	if !errors.As(err, &re) || re.Code != errs.CodeRateLimited || re.Reason != "rate_limited" {
		t.Fatalf("append beyond the burst: %v, want CAP_003 rate_limited", err)
	}
	if re.MaxRecords != 1<<16 || re.MaxBytes != 256<<20 || re.InFlightRecords != 0 || re.InFlightBytes != 0 {
		t.Fatalf("CAP_003 without the capacity state: %#v", re)
	}
}
