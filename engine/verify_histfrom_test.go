package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// The 'k' rows below mhistory_from are the state a rebuild from a snapshot
// wrote at that frontier. Verify checked only that the rows there say what
// their records say, not that they are all there and no others: an index
// with every 'k' row deleted and a forged mhistory_from at every head
// verified while every Get answered "not found".

// deleteKeyRows deletes every 'k' row of the open database's index.
func deleteKeyRows(t *testing.T, db *DB) {
	t.Helper()
	if err := db.index.DeleteRange([]byte{schema.TagKey}, []byte{schema.TagKey + 1}, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

func setHistoryFrom(t *testing.T, db *DB, m map[string]uint64) {
	t.Helper()
	setRow(t, db, schema.MetaKey(schema.MetaHistoryFrom), schema.EncodeHistoryFrom(m))
}

func TestVerifyHistoryFromForged(t *testing.T) {
	heads := map[string]uint64{"a0": 300, "a1": 300, "a2": 300}
	t.Run("every k row gone, frontier at every head", func(t *testing.T) {
		db, _ := verifyFixture(t)
		deleteKeyRows(t, db)
		setHistoryFrom(t, db, heads)
		// The last record (i=899: a2 seq 300) is the put of k8 that the
		// state at the heads holds.
		wantFinding(t, db, errs.CodeIndexMismatch, "a2", 300, "at the rebuilt frontier")
		if _, err := db.Get(context.Background(), []byte("k8")); err == nil {
			t.Fatal("the fixture is not what the test thinks: k8 still reads")
		}
	})
	t.Run("index never rebuilt", func(t *testing.T) {
		// Every version is indexed, where a rebuild leaves only the state:
		// a1 seq 1 (k1, i=1) is a put many later versions supersede.
		db, _ := verifyFixture(t)
		setHistoryFrom(t, db, heads)
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", 1, "below the rebuilt frontier")
	})
	t.Run("beyond the head", func(t *testing.T) {
		db, _ := verifyFixture(t)
		setHistoryFrom(t, db, map[string]uint64{"a0": 300, "a1": 301, "a2": 300})
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", 301, "beyond its head")
	})
	t.Run("unknown anchor", func(t *testing.T) {
		db, _ := verifyFixture(t)
		setHistoryFrom(t, db, map[string]uint64{"zz": 1})
		wantFinding(t, db, errs.CodeIndexMismatch, "zz", 0, "does not know")
	})
}

// After a real rebuild from a snapshot, one deferred row deleted: a put of
// the state, or a delete (the rebuild writes every delete below the
// frontier).
func TestVerifyHistoryFromMissingRow(t *testing.T) {
	for _, typ := range []byte{schema.VersionPut, schema.VersionDelete} {
		t.Run(fmt.Sprintf("type=%d", typ), func(t *testing.T) {
			db, rows := deferredFixture(t)
			for _, r := range rows["a1"] {
				ve, err := schema.DecodeVersion(r[1])
				if err != nil {
					t.Fatal(err)
				}
				if ve.Type != typ {
					continue
				}
				setRow(t, db, r[0], nil)
				text := "at the rebuilt frontier"
				if typ == schema.VersionDelete {
					text = "the delete of key"
				}
				wantFinding(t, db, errs.CodeIndexMismatch, "a1", ve.Seq, text)
				return
			}
			t.Fatalf("no deferred row of type %d in a1", typ)
		})
	}
}

// After a real rebuild from a snapshot, a row added for a put below the
// frontier that a later version supersedes: it says what its record says,
// but the state at the frontier does not hold it.
func TestVerifyHistoryFromExtraVersion(t *testing.T) {
	ctx := context.Background()
	db, _ := deferredFixture(t)
	hf := db.histFrom["a1"]
	if hf == 0 {
		t.Fatal("no rebuilt frontier for a1")
	}
	for rec, err := range db.Log(ctx, "a1", 1, hf) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Type != segment.TypePut || len(rec.Value) > fixtureOptions(nil).InlineValueMax {
			continue
		}
		k := schema.VersionKey(rec.Key, rec.Counter, "a1")
		if _, closer, err := db.index.Get(k); err == nil {
			closer.Close()
			continue // the state's version
		}
		ve := schema.Version{Type: schema.VersionPut, Seq: rec.Seq, Time: rec.Time.UnixNano(), Hash: rec.Hash, Inline: true, Value: slices.Clone(rec.Value)}
		setRow(t, db, k, ve.Append(nil))
		wantFinding(t, db, errs.CodeIndexMismatch, "a1", rec.Seq, "supersedes")
		return
	}
	t.Fatal("no superseded put below the rebuilt frontier of a1")
}

// A rebuild from a snapshot, then appends (to keys the state holds and to
// new ones), deletes, and truncating compactions — one cutting below the
// rebuilt frontier, the next through segments that straddle it — verify at
// every step, in full and from a checkpoint.
func TestVerifyHistoryFromAfterRebuildNoFalseFindings(t *testing.T) {
	ctx := context.Background()
	db, _ := deferredFixture(t)
	skey, vkey := coverKeys(t)
	verify := func(stage string) {
		t.Helper()
		rep, err := db.Verify(ctx, VerifyOptions{})
		if err != nil || !rep.OK {
			t.Fatalf("%s: verify: %v %+v", stage, err, rep.Failures)
		}
		msg, _, err := db.CreateCheckpoint(ctx, skey)
		if err != nil {
			t.Fatal(err)
		}
		from, err := proof.OpenCheckpoint(msg, vkey)
		if err != nil {
			t.Fatal(err)
		}
		write(t, db, stage)
		rep, err = db.Verify(ctx, VerifyOptions{From: from})
		if err != nil || !rep.OK {
			t.Fatalf("%s: verify from a checkpoint: %v %+v", stage, err, rep.Failures)
		}
	}
	verify("after the rebuild")
	for round := 0; round < 3; round++ {
		if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
			t.Fatal(err)
		}
		verify(fmt.Sprintf("after compaction %d", round))
	}
	for _, a := range []string{"a0", "a1", "a2"} {
		first, err := db.firstPresent(a)
		if err != nil {
			t.Fatal(err)
		}
		if first <= db.histFrom[a] {
			t.Fatalf("anchor %s: the log was not truncated past the rebuilt frontier (first present %d, frontier %d)", a, first, db.histFrom[a])
		}
	}
}

// write appends puts to keys below and above the fixture's, and deletes,
// on every anchor: enough to seal segments.
func write(t *testing.T, db *DB, tag string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 150; i++ {
		a := fmt.Sprintf("a%d", (i+1)%3)
		k := []byte(fmt.Sprintf("k%03d", (i*7)%70))
		if i%13 == 4 {
			if _, err := db.Delete(ctx, a, k); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := db.Put(ctx, a, k, []byte(fmt.Sprintf("%s/%d", tag, i))); err != nil {
			t.Fatal(err)
		}
	}
}
