package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// After a rebuild from a snapshot, one located 'k' row above the rebuilt
// frontier altered: the anchor's keyed sums differ, and its rows are matched
// one by one to name the bad one. The rows expected then were every
// record's, those below mhistory_from too, which the rebuild never wrote:
// verify named each healthy record below the frontier as lacking its 'k'
// row (INT_004, 133 false findings for a1), beside the one real one.
func TestReview2VerifyTamperedRowAboveHistoryFrom(t *testing.T) {
	db, _ := deferredFixture(t)
	hf := db.histFrom["a1"]
	if hf == 0 {
		t.Fatal("no rebuilt frontier for a1")
	}
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagKey}, UpperBound: []byte{schema.TagKey + 1}})
	if err != nil {
		t.Fatal(err)
	}
	var k []byte
	var ve schema.Version
	for it.First(); it.Valid(); it.Next() {
		if schema.KindOf(it.Value()) != schema.Located {
			continue
		}
		if _, _, a, err := schema.ParseVersionKey(it.Key()); err == nil && a == "a1" {
			k = append([]byte(nil), it.Key()...)
			ve, _ = schema.DecodeVersion(it.Value())
			break
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if k == nil || ve.Seq <= hf {
		t.Fatalf("no located row of a1 above its rebuilt frontier %d", hf)
	}
	ve.Hash[0] ^= 1
	setRow(t, db, k, ve.Append(nil))
	rep := wantFinding(t, db, errs.CodeIndexMismatch, "a1", ve.Seq, "")
	for _, f := range rep.Failures {
		if f.Seq != ve.Seq {
			t.Errorf("a finding about a record the row does not name: %s %s seq %d: %s", f.Code, f.Anchor, f.Seq, f.Message)
		}
	}
}

// CreateCheckpoint racing Close: it checks that the database is open, then
// reads the index (the anchors, the trees) and, since it signs only durable
// records, settles (Sync). Close closes the index once nothing it waits for
// is in flight, and nothing held it off: a CreateCheckpoint that passed the
// check read the closed index, and Pebble panics ("pebble: closed"),
// taking the process down instead of answering IO_001 "database is closed"
// (or signing). Here it waits on db.checkpointMu, which the test holds, while
// Close runs.
func TestReview2CheckpointRacingClose(t *testing.T) {
	ctx := context.Background()
	skey, _ := coverKeys(t)
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	db.checkpointMu.Lock()
	done := make(chan string, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Sprint("panic: ", r)
			}
		}()
		_, _, err := db.CreateCheckpoint(ctx, skey)
		if err != nil && !errors.Is(err, ErrWriteFailed) {
			done <- fmt.Sprint("error: ", err)
			return
		}
		done <- ""
	}()
	time.Sleep(50 * time.Millisecond) // it waits on db.checkpointMu
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		closed <- err
	case <-time.After(200 * time.Millisecond): // Close waits for it
	}
	db.checkpointMu.Unlock()
	if s := <-done; s != "" {
		t.Fatalf("CreateCheckpoint racing Close: %s", s)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
