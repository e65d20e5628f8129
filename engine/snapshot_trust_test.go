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

// covered is the number of records a snapshot's frontier covers.
func covered(s snapshot.Info) uint64 { return s.Frontier.Records() }

// A snapshot counts for the planner only when the audit log records it, with
// the file hash its bytes hash to and its state hash; any other is noted,
// neither counted nor deleted. Counted, a readable snapshot with the log's
// frontier dropped in at the log's head would stand as the newest: it would
// keep the trigger from firing (no record counted as unsnapshotted), and
// keep_snapshots would delete the database's own snapshots in its favour.
func TestForgedSnapshotSteersNoRetention(t *testing.T) {
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

// With raw_log "truncate", the truncation lies below the database's own
// snapshots only, and a snapshot the audit log does not vouch for stops
// nothing: one the replay proves is adopted before the truncation (a crash
// between a snapshot's file and its audit line leaves one), the others are
// left for verify to report. Kept as the newest instead, it would get the
// database's own deleted and the truncation put below it: a forged one would
// stop every compaction (its replay fails when it is to be adopted), and one
// with the true state would move the log's start to its frontier.
func TestForgedSnapshotMovesNoTruncation(t *testing.T) {
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

// Stats measures the records not yet in a snapshot from the newest snapshot
// the audit log vouches for. Measured from any readable snapshot of the log,
// one dropped in at the head would make every record look covered.
func TestStatsCountOnlyTheDatabasesSnapshots(t *testing.T) {
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

// A snapshot written over one the audit log vouches for, with the same
// frontier and state but other bytes (another creation time, which dates the
// time trigger), is INT_003: its file hash is not the one the audit log
// recorded under its name, though its replay gives the recorded state.
func TestVerifyHoldsAnAuditedNameToItsHashes(t *testing.T) {
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

// A compaction that truncates the log adopts a snapshot the audit log does
// not record when a replay proves its state. The replay says nothing of its
// creation time, which dates the time trigger, and a file dated after now
// may be the database's own snapshot, dated so by a clock set back across a
// crash (TestCompactCrashBeforeSnapshotAuditLine): refused, it would be
// truncated below and reported corrupt. So such a file is adopted, the plan
// notes its date, and the planner takes the date as due: the next run with
// new records takes a snapshot, and a true-state copy dated ten years ahead
// cannot keep every_seconds from firing for ten years.
func TestAdoptionOfASnapshotDatedInTheFuture(t *testing.T) {
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

// TestBrokenAuditLogVouchesForNothing: with an audit log whose chain
// fails, no snapshot is known to be the database's: the plan counts none,
// deletes none, and its notes say why (not that the log lacks them).
func TestBrokenAuditLogVouchesForNothing(t *testing.T) {
	ctx := context.Background()
	fs, db, own := fixtureWithOwnSnapshot(t)
	// A second line: a failing last line alone reads as a torn append.
	fillAnchor(t, db, "a0", 5, "more")
	if _, err := db.CreateSnapshot(ctx, ""); err != nil {
		t.Fatal(err)
	}
	data := mustReadFile(t, fs, db.AuditPath())
	i := strings.Index(string(data), `"time":"`) + len(`"time":"`)
	data[i] ^= 1 // the first line's time: its hash no longer holds
	mustWriteFile(t, fs, db.AuditPath(), data)
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

// The compaction planner leaves out, with a note, a well-formed snapshot
// whose frontier is not the log's (another database's, or one made up), as
// it does a snapshot that cannot be read. Counted, it would stand as the
// newest: keep_snapshots would delete the database's own snapshots, and no
// record would count as unsnapshotted, so none would be taken again.
func TestCompactionIgnoresASnapshotOfAnotherLog(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db, _ := compactFixture(t, fs)
	defer db.Close()
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "forever", VerifyBeforeDelete: true}
	res, err := db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil || res.Created == nil {
		t.Fatalf("compact: %+v %v", res, err)
	}
	own := *res.Created
	far := snapshot.Frontier{}
	for id, h := range own.Frontier {
		far[id] = snapshot.Head{Seq: h.Seq + 1000, Hash: h.Hash}
	}
	foreign, err := snapshot.Create(fs, db.SnapshotsDir(), snapshot.Meta{Frontier: far}, func(func(snapshot.Entry, error) bool) {})
	if err != nil {
		t.Fatal(err)
	}
	fillAnchor(t, db, "a0", 5, "more")
	res, err = db.Compact(ctx, policy, CompactOptions{Apply: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created == nil {
		t.Fatalf("records since the database's own snapshot, yet none was taken: %+v", res.Plan)
	}
	for _, a := range res.Plan.Actions {
		if a.Kind == snapshot.ActionDeleteSnapshot && a.Snapshot == foreign.Name {
			t.Fatalf("the plan deletes the foreign snapshot, which is not the database's: %+v", a)
		}
	}
	list, err := db.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range list {
		names[s.Name] = true
	}
	if !names[res.Created.Name] {
		t.Fatalf("the snapshot just taken is gone: %v", names)
	}
	noted := false
	for _, n := range res.Plan.Notes {
		noted = noted || strings.Contains(n, foreign.Name)
	}
	if !noted {
		t.Fatalf("no note names %s: %q", foreign.Name, res.Plan.Notes)
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
