package importer

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
)

// TestImportBatchesBoundedByBytes: a batch ends at Batch lines or at
// BatchBytes of keys and values, whichever comes first, so an import
// of large values holds a bounded amount of them (without the byte bound,
// 1,000 lines of 16 MiB values are held at once). Each batch is one commit group
// here (one writer), which the engine's metrics count.
func TestImportBatchesBoundedByBytes(t *testing.T) {
	const lines, value = 40, 1000
	per := int64(value + 2 + engine.RecordOverhead) // value, key "kNN", overhead
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var in strings.Builder
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&in, `{"anchor":"a","key":"k%02d","value":"%s"}`+"\n", i, strings.Repeat("v", value))
	}
	ctx := context.Background()
	input, err := Check(ctx, strings.NewReader(in.String()), nil, segment.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer input.Close()
	before := db.Metrics().Groups
	im := &Importer{DB: db, Batch: 1000, BatchBytes: 5 * per} // five lines a batch
	sum, err := im.Import(ctx, input)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Imported != lines {
		t.Fatalf("imported %d of %d lines", sum.Imported, lines)
	}
	if groups := db.Metrics().Groups - before; groups < lines/5 {
		t.Fatalf("%d lines in %d appends: batches were not cut at %d bytes", lines, groups, im.BatchBytes)
	}
}
