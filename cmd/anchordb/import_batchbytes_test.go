package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine"
)

// TestImportBatchesBoundedByBytes: a batch ends at --batch lines or at
// importBatchBytes of keys and values, whichever comes first, so an import
// of large values holds a bounded amount of them (without the byte bound,
// 1,000 lines of 16 MiB values are held at once). Each batch is one commit group
// here (one writer), which the engine's metrics count.
func TestImportBatchesBoundedByBytes(t *testing.T) {
	defer func(v int64) { importBatchBytes = v }(importBatchBytes)
	const lines, value = 40, 1000
	per := int64(value + 2 + engine.RecordOverhead) // value, key "kNN", overhead
	importBatchBytes = 5 * per                      // five lines a batch
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var in strings.Builder
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&in, `{"anchor":"a","key":"k%02d","value":"%s"}`+"\n", i, strings.Repeat("v", value))
	}
	before := db.Metrics().Groups
	im := &importer{e: &env{ctx: context.Background()}, db: db, limits: db.Options().Limits, batch: 1000, prog: &progress{}, total: lines}
	if err := im.run(strings.NewReader(in.String())); err != nil {
		t.Fatal(err)
	}
	if im.imported != lines {
		t.Fatalf("imported %d of %d lines", im.imported, lines)
	}
	if groups := db.Metrics().Groups - before; groups < lines/5 {
		t.Fatalf("%d lines in %d appends: batches were not cut at %d bytes", lines, groups, importBatchBytes)
	}
}
