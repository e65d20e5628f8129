package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/snapshot"
)

// Which files in snapshots/ are the database's snapshots.
//
// A snapshot's hashes are unkeyed: anyone who can write snapshots/ can make
// a well-formed file whose frontier is the log's, with any state, any
// creation time and any name. What says a file is one the database wrote
// is the audit log (SPEC §6): every snapshot created in the database is
// recorded there, with its file hash and state hash, before anything relies
// on it. So a decision that deletes (keep_snapshots, the truncation cut) or
// that only the newest snapshot steers (the triggers, stats) counts a file
// only when
//
//   - the audit log records a snapshot of its name as created and not
//     removed since, in the lines up to the head the index recorded;
//   - its bytes hash to the file hash recorded there (every byte read, not
//     the hash its footer claims), and its state hash is the one recorded;
//   - its frontier's head hashes are the log's.
//
// Any other file is left alone: neither counted nor deleted, and named in
// the plan with why. A file the audit log does not record at all (STATE_003)
// may be the database's all the same — a crash between a snapshot's file
// and its audit line leaves one — so a compaction that cuts the log offers
// each such file to a replay first, and records the ones it proves as
// adopted (adoptUnvouched): they count from the next run on.

// countedSnapshots is the outcome of countSnapshots.
type countedSnapshots struct {
	// list holds every file snapshot.List finds, oldest first. Err is nil
	// exactly on those that count.
	list []snapshot.Info
	// leftovers are files the audit log records as removed, with the file
	// hash their bytes hash to: a removal that was audited and did not
	// happen. Not in list.
	leftovers []snapshot.Info
	// unvouched are the readable files of this log that the audit log does
	// not record (Err STATE_003 in list): adoptUnvouched's candidates.
	unvouched []snapshot.Info
}

// snapshotCheck is how much of a file countSnapshots reads before it
// counts.
type snapshotCheck int

const (
	// checkClaims takes the hashes the file's footer claims: enough for
	// Stats, which deletes nothing and must stay cheap on large snapshots.
	// A vouched name whose bytes were rewritten under the same claims
	// counts there; compaction, which reads them, does not count it.
	checkClaims snapshotCheck = iota
	// checkBytes hashes every byte of the file against its file hash.
	checkBytes
	// checkEntries is checkBytes and every entry against the state hash
	// (snapshot.Verify); the file counts with Verified set.
	checkEntries
)

// countSnapshots lists snapshots/ and sorts the files as the package doc
// above says, reading each file that may count as depth says.
func (db *DB) countSnapshots(ctx context.Context, depth snapshotCheck) (countedSnapshots, error) {
	var out countedSnapshots
	all, err := db.Snapshots(ctx)
	if err != nil {
		return out, err
	}
	created, removed, err := db.auditedSnapshotLog()
	why := "the audit log does not record it, so it is not known to be a snapshot this database wrote"
	if err != nil {
		// NB: a log that cannot be read as the database's vouches for
		// nothing (verify reports the log itself); an I/O failure is one.
		if !errs.CodeOf(err).IsIntegrity() {
			return out, err
		}
		created, removed = nil, nil
		why = "the audit log cannot vouch for any snapshot (" + errs.Message(err) + ")"
	}
	check := func(s snapshot.Info) (snapshot.Info, error) {
		switch depth {
		case checkClaims:
			return s, nil
		case checkEntries:
			return snapshot.Verify(db.fs, s.Path)
		}
		r, err := snapshot.Open(db.fs, s.Path) // hashes the whole file
		if err != nil {
			return s, err
		}
		info := r.Info()
		return info, r.Close()
	}
	for _, s := range all {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if s.Err != nil {
			out.list = append(out.list, s)
			continue
		}
		if it, ok := created[s.Name]; ok {
			if s, err = db.checkVouched(s, it, check); err != nil {
				return out, err
			}
			out.list = append(out.list, s)
			continue
		}
		if h, ok := removed[s.Name]; ok && h == s.FileHash {
			if v, err := check(s); err == nil && v.FileHash == h {
				out.leftovers = append(out.leftovers, v)
				continue
			}
		}
		match, err := db.frontierMatchesLog(s.Frontier)
		if err != nil {
			return out, err
		}
		if !match {
			s.Err = notOfLog(s.Path)
			out.list = append(out.list, s)
			continue
		}
		e := errs.New(errs.CodeDependencyMissing, "%s: neither counted nor deleted", why)
		e.File = s.Path
		s.Err = e
		out.list = append(out.list, s)
		out.unvouched = append(out.unvouched, s)
	}
	return out, nil
}

// checkVouched returns s as check reads it when its bytes are the ones the
// audit log recorded as it and its frontier is the log's, else s with Err
// set (INT_003). The error is a failure to read the index.
func (db *DB) checkVouched(s snapshot.Info, it snapshot.AuditItem, check func(snapshot.Info) (snapshot.Info, error)) (snapshot.Info, error) {
	// The claimed hashes first: a file they already fail is not read.
	if s.FileHash != it.Hash || s.StateHash != it.StateHash {
		s.Err = otherHashes(s, it)
		return s, nil
	}
	v, err := check(s)
	if err != nil {
		s.Err = err
		return s, nil
	}
	if v.FileHash != it.Hash || v.StateHash != it.StateHash {
		s.Err = otherHashes(v, it)
		return s, nil
	}
	match, err := db.frontierMatchesLog(v.Frontier)
	if err != nil {
		return s, err
	}
	if !match {
		s.Err = notOfLog(s.Path)
		return s, nil
	}
	return v, nil
}

// otherHashes is the INT_003 of a file that is not the snapshot the audit
// log recorded under its name.
func otherHashes(s snapshot.Info, it snapshot.AuditItem) *errs.Error {
	e := errs.New(errs.CodeSnapshotCorrupted, "the audit log records snapshot %s with file hash %s and state hash %s; this file has %s and %s: it is not the snapshot the database wrote",
		s.Name, it.Hash, it.StateHash, s.FileHash, s.StateHash)
	e.File = s.Path
	return e
}

// notOfLog is the INT_003 of a snapshot whose frontier is not the log's.
func notOfLog(path string) *errs.Error {
	e := errs.New(errs.CodeSnapshotCorrupted, "its frontier names heads the log does not have: it is not a snapshot of this database")
	e.File = path
	return e
}

// adoptUnvouched offers each snapshot the audit log does not record to a
// replay before a plan cuts the log, and records the ones it proves as
// adopted: below the cut no replay could prove them any more, and verify
// would then hold them to an audit entry that does not exist (a crash
// between a snapshot's file and its audit line leaves such a snapshot of
// the database's own). One the replay does not prove is left alone, for
// verify to report; it returns a note for each. The caller holds
// compactMu.
func (db *DB) adoptUnvouched(ctx context.Context, unvouched []snapshot.Info, ref string) ([]string, error) {
	var notes []string
	for _, s := range unvouched {
		v, err := db.verifySnapshot(ctx, s.Path, false)
		if err == nil && !v.Replayed {
			err = errs.New(errs.CodeDependencyMissing, "%s", v.Note)
		}
		if err != nil {
			if !errs.CodeOf(err).IsIntegrity() && errs.CodeOf(err) != errs.CodeDependencyMissing {
				return notes, err
			}
			notes = append(notes, fmt.Sprintf("snapshot %s, which the audit log does not record, is not proved by replay and stays ignored: %v", s.Name, err))
			continue
		}
		// NB: a replay proves the state, not the creation time, which
		// dates the time trigger. A file dated after now was refused here
		// once, since adopted it held every_seconds off until then; but a
		// crash between the file and its line, with the clock set back
		// on the reboot, leaves the database's own snapshot so dated, and
		// left out it was cut below and verify called it corrupt
		// (INT_003). The planner takes a date after now as due instead
		// (snapshot.PlanCompaction), so the date costs one snapshot at
		// most, and the state, which is what counts, is proved.
		dated := ""
		if now := db.opts.Clock(); v.Info.Created.After(now) {
			dated = fmt.Sprintf("; it is dated %s, after now (%s), so every_seconds takes it as due",
				v.Info.Created.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		if err := db.appendAudit(snapshot.AuditEntry{Time: db.opts.Clock(), PolicyRef: ref, Action: string(snapshot.ActionCreateSnapshot),
			Added: []snapshot.AuditItem{snapshot.SnapshotItem(v.Info)}, Note: "adopted: not in the audit log, proved by replay before a cut"}); err != nil {
			return notes, err
		}
		notes = append(notes, fmt.Sprintf("snapshot %s, which the audit log did not record, is proved by replay and recorded as adopted: it counts from the next run%s", s.Name, dated))
	}
	return notes, nil
}

// SnapshotsAudited reports, for each snapshot of list (as Snapshots returns
// them), whether the audit log records it as created and not removed, with
// the file and state hashes the file claims: whether it is one of the
// database's own. Only the claims are compared (Snapshots reads a file's
// header and footer, no more); VerifySnapshot, and compaction, read every
// byte. A file that cannot be read, or an audit log that cannot be read as
// the database's, is not audited.
func (db *DB) SnapshotsAudited(ctx context.Context, list []snapshot.Info) ([]bool, error) {
	// The audit log's head is an index read: Close waits for it.
	if err := db.beginRead(ctx); err != nil {
		return nil, err
	}
	defer db.endRead()
	vouched, _, err := db.vouchedSnapshots()
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(list))
	for i, s := range list {
		out[i] = s.Err == nil && vouches(vouched, s)
	}
	return out, nil
}
