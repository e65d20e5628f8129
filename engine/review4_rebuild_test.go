package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// forgeSnapshot writes into dir a well-formed snapshot with s's frontier and
// entries, the value of key changed to "FORGED", created at created: what
// anybody who can write the snapshots directory can make, since the file's
// hashes are unkeyed. s stays.
func forgeSnapshot(t *testing.T, fs vfs.FS, dir string, s snapshot.Info, key []byte, created time.Time) snapshot.Info {
	t.Helper()
	r, err := snapshot.Open(fs, s.Path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []snapshot.Entry
	changed := false
	for e, err := range r.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		e = e.Clone()
		if bytes.Equal(e.Key, key) {
			e.Value, changed = []byte("FORGED"), true
		}
		entries = append(entries, e)
	}
	_ = r.Close()
	if !changed {
		t.Fatalf("snapshot %s has no key %q", s.Name, key)
	}
	forged, err := snapshot.Create(fs, dir, snapshot.Meta{Frontier: s.Frontier, PolicyRef: s.PolicyRef, Created: created},
		func(yield func(snapshot.Entry, error) bool) {
			for _, e := range entries {
				if !yield(e, nil) {
					return
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return forged
}

// rebuildEvents returns the report's events of kind.
func rebuildEvents(rep RecoveryReport, kind string) []RecoveryEvent {
	var out []RecoveryEvent
	for _, ev := range rep.Events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// TestReview4RebuildFromSnapshotNeedsTheAuditLog: rebuild-index
// --from-snapshot took the newest snapshot whose file checked and whose
// frontier was the log's, and fed its state to the index as it stood. A
// well-formed snapshot written beside the database's own, with the same
// frontier and one value changed, became the rebuilt index's state: Get
// returned the forged value, and nothing said so. The fast path now takes
// only a snapshot the audit log records as created (name, file hash and
// state hash), skips the others with STATE_003, and falls back to a full
// replay when none is left.
func TestReview4RebuildFromSnapshotNeedsTheAuditLog(t *testing.T) {
	ctx := context.Background()
	key := []byte("k001")
	for _, tc := range []struct {
		name string
		// keep: the database's own snapshot stays beside the forgery;
		// breakAudit: the audit log's chain is broken, so it vouches for
		// nothing.
		keep, breakAudit bool
	}{
		{"beside the genuine one", true, false},
		{"alone", false, false},
		{"audit log broken", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			db, want := compactFixture(t, fs)
			if _, ok := want[string(key)]; !ok {
				t.Fatalf("the fixture's state has no %s", key)
			}
			s, err := db.CreateSnapshot(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			forged := forgeSnapshot(t, fs, db.SnapshotsDir(), s, key, s.Created.Add(time.Hour))
			audit := db.AuditPath()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if !tc.keep {
				if err := fs.Remove(s.Path); err != nil {
					t.Fatal(err)
				}
			}
			if tc.breakAudit {
				// Two lines that are not audit lines: the chain fails at
				// the first (a failing last line alone reads as torn).
				f, err := fs.OpenReadWrite(audit, vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				st, err := f.Stat()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("{\"seq\":9}\n{\"seq\":10}\n"), st.Size()); err != nil {
					t.Fatal(err)
				}
				_ = f.Close()
			}
			opts := fixtureOptions(fs)
			plan, err := RebuildIndexWith(ctx, "db", opts, RebuildOptions{Apply: true, FromSnapshot: true})
			if err != nil {
				t.Fatal(err)
			}
			from := rebuildEvents(plan.Report, EventStateFromSnapshot)
			for _, ev := range from {
				if ev.File != s.Path {
					t.Fatalf("the rebuild took its state from %s, not the database's own %s", ev.File, s.Path)
				}
			}
			wantFast := tc.keep && !tc.breakAudit
			if got := len(from) == 1; got != wantFast {
				t.Fatalf("fast path taken: %v, want %v; events %+v", got, wantFast, plan.Report.Events)
			}
			if !wantFast && len(rebuildEvents(plan.Report, EventFastRebuildAbandoned)) == 0 {
				t.Fatalf("a full replay without a fast_rebuild_abandoned event: %+v", plan.Report.Events)
			}
			skipped := false
			for _, ev := range rebuildEvents(plan.Report, EventSnapshotSkipped) {
				if ev.File == forged.Path {
					skipped = true
					if ev.Err == nil || ev.Err.Code != errs.CodeDependencyMissing {
						t.Fatalf("the forgery was skipped with %v; want STATE_003", ev.Err)
					}
				}
			}
			if !skipped {
				t.Fatalf("no snapshot_skipped event for the forgery %s: %+v", forged.Path, plan.Report.Events)
			}
			db, err = Open("db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkState(t, db, want)
		})
	}
}
