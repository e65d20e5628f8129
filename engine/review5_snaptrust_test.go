package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// An intruder is a well-formed snapshot in snapshots/ whose frontier is
// the log's (so the frontier check lets it through) but which the audit
// log does not vouch for as it stands.
type intruderKind int

const (
	// intruderForged: not in the audit log, one value changed.
	intruderForged intruderKind = iota
	// intruderUnaudited: not in the audit log, the log's true state (what a
	// crash between a snapshot's file and its audit line leaves, or a copy
	// made by hand).
	intruderUnaudited
	// intruderRewritten: written over a snapshot the audit log vouches
	// for, under its name, with other bytes.
	intruderRewritten
)

func (k intruderKind) String() string {
	return [...]string{"forged", "unaudited copy", "vouched name rewritten"}[k]
}

var intruderKinds = []intruderKind{intruderForged, intruderUnaudited, intruderRewritten}

// dropIntruder writes an intruder of kind k at the log's current frontier
// into db's snapshots directory and returns what List reads of it.
// intruderRewritten writes it over over (a snapshot the audit log vouches
// for).
func dropIntruder(t *testing.T, fs vfs.FS, db *DB, k intruderKind, over snapshot.Info) snapshot.Info {
	t.Helper()
	ctx := context.Background()
	var s snapshot.Info
	var err error
	switch k {
	case intruderUnaudited:
		s, err = db.CreateSnapshotTo(ctx, fs, db.SnapshotsDir(), "")
		if err != nil {
			t.Fatal(err)
		}
	default:
		g, err := db.CreateSnapshotTo(ctx, fs, "elsewhere", "")
		if err != nil {
			t.Fatal(err)
		}
		s = forgeSnapshot(t, fs, db.SnapshotsDir(), g, []byte("k001"), g.Created)
	}
	if k == intruderRewritten {
		if err := fs.Rename(s.Path, over.Path); err != nil {
			t.Fatal(err)
		}
		s.Name, s.Path = over.Name, over.Path
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list {
		if l.Name == s.Name {
			if l.Err != nil {
				t.Fatalf("scenario: the intruder %s does not read: %v", l.Name, l.Err)
			}
			return l
		}
	}
	t.Fatalf("scenario: the intruder %s is not listed", s.Name)
	return s
}

// checkPlanIgnores fails unless the plan leaves the intruder out: no action
// names it, it is not kept, and a note names it.
func checkPlanIgnores(t *testing.T, plan snapshot.Plan, intruder string) {
	t.Helper()
	for _, a := range plan.Actions {
		if a.Snapshot == intruder {
			t.Errorf("the plan acts on the intruder %s: %+v", intruder, a)
		}
	}
	for _, k := range plan.Keep {
		if k == intruder {
			t.Errorf("the plan keeps the intruder %s as one of the database's snapshots", intruder)
		}
	}
	noted := false
	for _, n := range plan.Notes {
		noted = noted || strings.Contains(n, intruder) && strings.Contains(n, "audit log")
	}
	if !noted {
		t.Errorf("no note says the intruder %s is left out for the audit log: %q", intruder, plan.Notes)
	}
}

// copySnapshot writes into dir a snapshot with s's frontier, policy_ref
// and entries, created at created: the same state in other bytes.
func copySnapshot(t *testing.T, fs vfs.FS, dir string, s snapshot.Info, created time.Time) snapshot.Info {
	t.Helper()
	r, err := snapshot.Open(fs, s.Path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []snapshot.Entry
	for e, err := range r.Entries() {
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e.Clone())
	}
	_ = r.Close()
	c, err := snapshot.Create(fs, dir, snapshot.Meta{Frontier: s.Frontier, PolicyRef: s.PolicyRef, Created: created},
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
	return c
}

// covered is the number of records a snapshot's frontier covers.
func covered(s snapshot.Info) uint64 { return s.Frontier.Records() }

// TestReview5IntruderSteersNoRetention: the planner counted every readable
// snapshot whose frontier was the log's, whether or not the audit log
// vouched for it. One dropped in at the log's head stood as the newest:
// it kept the trigger from firing (no record counted as unsnapshotted) and
// keep_snapshots deleted the database's own snapshots in its favour. A
// snapshot counts now only when the audit log records it, with the file
// hash its bytes hash to and its state hash; any other is noted, neither
// counted nor deleted.
func TestReview5IntruderSteersNoRetention(t *testing.T) {
	ctx := context.Background()
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 2, RawLog: "forever", VerifyBeforeDelete: true}
	for _, k := range intruderKinds {
		t.Run(k.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			db, _ := compactFixture(t, fs)
			defer db.Close()
			var own []snapshot.Info
			for i := 0; i < 2; i++ {
				fillAnchor(t, db, "a0", 5, "own")
				res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
				if err != nil || res.Created == nil {
					t.Fatalf("compact: %+v %v", res, err)
				}
				own = append(own, *res.Created)
			}
			fillAnchor(t, db, "a1", 5, "more")
			in := dropIntruder(t, fs, db, k, own[1])
			res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
			if err != nil {
				t.Fatal(err)
			}
			checkPlanIgnores(t, res.Plan, in.Name)
			if res.Created == nil {
				t.Fatalf("records since the database's newest snapshot, yet none was taken: %s", res.Plan)
			}
			if _, err := fs.Stat(in.Path); err != nil {
				t.Fatalf("the intruder was removed: %v", err)
			}
			// A second run: the one just taken and the newest of the
			// database's before it are kept; the intruder still stays.
			res, err = db.Compact(ctx, policy, CompactOptions{Apply: true})
			if err != nil {
				t.Fatal(err)
			}
			checkPlanIgnores(t, res.Plan, in.Name)
			if _, err := fs.Stat(in.Path); err != nil {
				t.Fatalf("the intruder was removed by the second run: %v", err)
			}
		})
	}
}

// TestReview5IntruderMovesNoCut: with raw_log "truncate", a snapshot the
// audit log does not vouch for was kept as the newest, the database's own
// deleted, and the cut put below it. A forged one then stopped every
// compaction (its replay failed when it was to be adopted); one with the
// true state was adopted and moved the cut to its frontier. The cut now
// lies below the database's own snapshots only, and an intruder stops
// nothing; one the replay proves is adopted before the cut (a crash
// between a snapshot's file and its audit line leaves one), the others
// are left for verify to report.
func TestReview5IntruderMovesNoCut(t *testing.T) {
	ctx := context.Background()
	for _, k := range intruderKinds {
		t.Run(k.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			db, want := compactFixture(t, fs)
			defer db.Close()
			res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
			if err != nil || res.Created == nil {
				t.Fatalf("compact: %+v %v", res, err)
			}
			own := *res.Created
			fillAnchor(t, db, "a0", 60, "more")
			for i := 0; i < 60; i++ {
				want[fmt.Sprintf("fill-more-%04d", i)] = "some filler value of a few dozen bytes"
			}
			in := dropIntruder(t, fs, db, k, own)
			res, err = coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
			if err != nil {
				t.Fatalf("a compaction beside the intruder: %v", err)
			}
			checkPlanIgnores(t, res.Plan, in.Name)
			limit := own.Frontier
			if k == intruderRewritten {
				limit = nil // the database's only snapshot was written over: nothing to cut below
			}
			for _, a := range res.Plan.Actions {
				if a.Kind == snapshot.ActionRemoveSegment && a.LastSeq > limit[a.Anchor].Seq {
					t.Errorf("segment %d of %q (seqs %d..%d) removed; the database's own snapshot covers seq %d",
						a.Segno, a.Anchor, a.FirstSeq, a.LastSeq, limit[a.Anchor].Seq)
				}
			}
			if _, err := fs.Stat(in.Path); err != nil {
				t.Fatalf("the intruder was removed: %v", err)
			}
			audited, err := db.auditedSnapshots()
			if err != nil {
				t.Fatal(err)
			}
			it, adopted := audited[in.Name]
			adopted = adopted && it.Hash == in.FileHash
			if adopted != (k == intruderUnaudited) {
				t.Errorf("intruder adopted: %v; want it only for the log's true state", adopted)
			}
			checkState(t, db, want)
			// verify reports a forgery, and only that.
			rep, err := db.Verify(ctx, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rep.Failures {
				if f.File != in.Path || f.Code != errs.CodeSnapshotCorrupted {
					t.Errorf("verify finding: %s %s: %s", f.Code, f.File, f.Message)
				}
			}
			if rep.OK != (k == intruderUnaudited) {
				t.Errorf("verify ok: %v; findings %+v", rep.OK, rep.Failures)
			}
		})
	}
}

// TestReview5StatsCountOnlyTheDatabasesSnapshots: Stats measured the
// records not yet in a snapshot from the newest readable snapshot of the
// log, vouched for or not: one dropped in at the head made every record
// look covered.
func TestReview5StatsCountOnlyTheDatabasesSnapshots(t *testing.T) {
	ctx := context.Background()
	for _, k := range intruderKinds {
		t.Run(k.String(), func(t *testing.T) {
			fs, db, own := fixtureWithOwnSnapshot(t)
			fillAnchor(t, db, "a0", 5, "more")
			dropIntruder(t, fs, db, k, own)
			st, err := db.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want, snaps := 405-covered(own), 1
			if k == intruderRewritten {
				want, snaps = 405, 0
			}
			if st.RecordsUnsnapshotted != want || st.Snapshots != snaps {
				t.Fatalf("stats: %d records unsnapshotted, %d snapshots; want %d and %d (the intruder is not the database's)",
					st.RecordsUnsnapshotted, st.Snapshots, want, snaps)
			}
		})
	}
}

// TestReview5VerifyHoldsAVouchedNameToItsHashes: a snapshot written over
// one the audit log vouches for, with the same frontier and state but
// other bytes (another creation time, which dates the time trigger),
// passed verify, because its replay gives the recorded state. Its file
// hash is not the one the audit log recorded under its name: INT_003.
func TestReview5VerifyHoldsAVouchedNameToItsHashes(t *testing.T) {
	ctx := context.Background()
	fs, db, own := fixtureWithOwnSnapshot(t)
	re := copySnapshot(t, fs, "elsewhere", own, own.Created.AddDate(10, 0, 0))
	if re.StateHash != own.StateHash || re.FileHash == own.FileHash {
		t.Fatal("scenario: want the same state in other bytes")
	}
	if err := fs.Rename(re.Path, own.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := db.VerifySnapshot(ctx, own.Path); errs.CodeOf(err) != errs.CodeSnapshotCorrupted {
		t.Fatalf("snapshot verify of a vouched name with other bytes: %v; want INT_003", err)
	}
	rep, err := db.Verify(ctx, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Failures) != 1 || rep.Failures[0].File != own.Path || rep.Failures[0].Code != errs.CodeSnapshotCorrupted {
		t.Fatalf("verify: ok=%v %+v; want one INT_003 naming %s", rep.OK, rep.Failures, own.Path)
	}
}

// TestReview5AdoptionFromTheFuture: a compaction that cuts the log adopts
// a snapshot the audit log does not record when a replay proves its state.
// The replay says nothing of its creation time, which dates the time
// trigger: a true-state copy dated ten years ahead, once adopted, kept
// every_seconds from firing for ten years, so review 5 refused to adopt a
// file dated after now. That left the database's own snapshot, dated
// after now by a clock set back across a crash, to be cut below and
// reported corrupt (TestCompactCrashBeforeSnapshotAuditLine). Now such a
// file is adopted, the plan notes its date, and the planner takes the date
// as due: the next run with new records takes a snapshot.
func TestReview5AdoptionFromTheFuture(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	if _, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a0", 60, "more")
	g, err := db.CreateSnapshotTo(ctx, fs, "elsewhere", "")
	if err != nil {
		t.Fatal(err)
	}
	in := copySnapshot(t, fs, db.SnapshotsDir(), g, time.Now().AddDate(10, 0, 0))
	res, err := coveredCompact(t, db, truncatePolicy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Plan.Actions, func(a snapshot.Action) bool { return a.Kind == snapshot.ActionRecordCut }) {
		t.Fatalf("scenario: the plan cuts nothing: %s", res.Plan)
	}
	audited, err := db.auditedSnapshots()
	if err != nil {
		t.Fatal(err)
	}
	if it, ok := audited[in.Name]; !ok || it.Hash != in.FileHash {
		t.Fatalf("a true-state snapshot dated ten years ahead, proved by replay, was not adopted: %s", res.Plan)
	}
	noted := slices.ContainsFunc(res.Plan.Notes, func(n string) bool {
		return strings.Contains(n, in.Name) && strings.Contains(n, "adopted") && strings.Contains(n, "after now")
	})
	if !noted {
		t.Fatalf("no note says %s was adopted dated after now: %q", in.Name, res.Plan.Notes)
	}
	// Adopted, it is the newest snapshot (the same frontier as the one the
	// run took, and a later date); it holds every_seconds off no longer.
	fillAnchor(t, db, "a0", 5, "later")
	timeOnly := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EverySeconds: 3600}, KeepSnapshots: 3, RawLog: "forever", VerifyBeforeDelete: true}
	res, err = db.Compact(ctx, timeOnly, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Actions) == 0 || res.Plan.Actions[0].Trigger != "every_seconds" {
		t.Fatalf("every_seconds after adopting a snapshot dated ten years ahead: want it due, got\n%s", res.Plan)
	}
	if rep, err := db.Verify(ctx, VerifyOptions{}); err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Failures)
	}
}

// TestReview5BrokenAuditLogVouchesForNothing: with an audit log whose chain
// fails, no snapshot is known to be the database's: the plan counts none,
// deletes none, and its notes say why (not that the log lacks them).
func TestReview5BrokenAuditLogVouchesForNothing(t *testing.T) {
	ctx := context.Background()
	fs, db, own := fixtureWithOwnSnapshot(t)
	// A second line: a failing last line alone reads as a torn append.
	fillAnchor(t, db, "a0", 5, "more")
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	data := readAll(t, fs, db.AuditPath())
	i := strings.Index(string(data), `"time":"`) + len(`"time":"`)
	data[i] ^= 1 // the first line's time: its hash no longer holds
	writeAll(t, fs, db.AuditPath(), data)
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "forever", VerifyBeforeDelete: true}
	res, err := db.Compact(ctx, policy, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Keep) != 0 || slices.ContainsFunc(res.Plan.Actions, func(a snapshot.Action) bool { return a.Snapshot == own.Name }) {
		t.Fatalf("the plan counts %s, which a broken audit log cannot vouch for: %s", own.Name, res.Plan)
	}
	if !slices.ContainsFunc(res.Plan.Notes, func(n string) bool { return strings.Contains(n, own.Name) && strings.Contains(n, "cannot vouch") }) {
		t.Fatalf("no note says the audit log cannot vouch for %s: %q", own.Name, res.Plan.Notes)
	}
}

// fixtureWithOwnSnapshot is compactFixture on a fresh MemFS with one
// snapshot the database took itself (audited), closed when the test ends.
func fixtureWithOwnSnapshot(t *testing.T) (*vfs.MemFS, *DB, snapshot.Info) {
	t.Helper()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	t.Cleanup(func() { _ = db.Close() })
	own, err := db.CreateSnapshot(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return fs, db, own
}
