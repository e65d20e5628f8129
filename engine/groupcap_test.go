package engine

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestGroupJournalBlockIsBounded: with admission off nothing bounds how
// many batches queue behind a leader, and a group of all of them could make
// a journal block longer than journal.MaxPayload, which recovery takes for
// damage (stop 18's review). A leader takes queued requests only up to
// maxGroupJournalBytes. Here the bound is shrunk to a few batches and many
// writers contend: every block stays within it, and every record is there.
func TestGroupJournalBlockIsBounded(t *testing.T) {
	defer func(v int64) { maxGroupJournalBytes = v }(maxGroupJournalBytes)
	const batch, value = 4, 1 << 10
	maxGroupJournalBytes = 3 * batch * (value + 256)

	fs := vfs.NewMem()
	opts := Options{FS: fs, DisableAdmission: true, JournalPrealloc: -1}
	db := mustOpen(t, fs, opts)
	defer db.Close()
	ctx := context.Background()
	const writers, rounds = 16, 40
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				es := make([]Entry, batch)
				for i := range es {
					es[i] = Entry{Anchor: fmt.Sprintf("w%02d", w), Type: "put", Key: []byte(fmt.Sprintf("k%d-%d", r, i)), Value: bytes.Repeat([]byte{'v'}, value)}
				}
				if _, err := db.AppendBatch(ctx, es); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	gens, err := journal.List(fs, db.journalDir())
	if err != nil {
		t.Fatal(err)
	}
	blocks, records, most := 0, 0, 0
	for _, gen := range gens {
		if _, err := journal.ReadFile(fs, db.journalDir(), gen, 0, func(b journal.Block) error {
			blocks++
			most = max(most, len(b.Payload))
			if int64(len(b.Payload)) > maxGroupJournalBytes+4 {
				t.Errorf("a journal block of %d bytes; the bound is %d", len(b.Payload), maxGroupJournalBytes)
			}
			return schema.DecodeJournalBlock(b.Payload, func(schema.JournalRecord) error { records++; return nil })
		}); err != nil {
			t.Fatal(err)
		}
	}
	if records != writers*rounds*batch {
		t.Fatalf("the journal holds %d records in %d blocks, want %d", records, blocks, writers*rounds*batch)
	}
	t.Logf("%d blocks, the largest %d bytes", blocks, most)
}
