package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/snapshot"
)

// RetiredSnapshot is what RetireSnapshot did.
type RetiredSnapshot struct {
	Name string `json:"name"`
	// Finding is the check the snapshot failed, as VerifySnapshot said.
	Finding Finding `json:"finding"`
	// MovedTo is where the file went, under lost+found/.
	MovedTo string `json:"moved_to"`
}

// RetireSnapshot takes out of snapshots/ a snapshot that fails its checks:
// the operator's way back to a database that verifies after a snapshot was
// damaged. A corrupt snapshot is kept as evidence and reported by every
// verify, and one deleted by hand is reported as a missing audited snapshot
// (INT_003 either way); retiring one appends a retire_snapshot line to the
// audit log — the snapshot removed, its hashes, and a note naming the
// finding and where the file went — and then moves the file to
// lost+found/<name>-<Unix ns>.retired, where it stays for whoever studies
// it. The log then no longer vouches for the snapshot, as after a
// compaction deleted it.
//
// A snapshot the audit log records whose file is gone (deleted by hand)
// is retired the same way, its line saying the file was gone already.
//
// name is a file name in snapshots/. A snapshot that passes its checks is
// not retired (INPUT_001: compaction deletes snapshots beyond
// keep_snapshots); a name neither there nor recorded is STATE_003; an
// error reading it that is no finding (IO_001) is returned as it is, and
// nothing is done.
func (db *DB) RetireSnapshot(ctx context.Context, name string) (RetiredSnapshot, error) {
	var out RetiredSnapshot
	// Like a compaction: it appends to the audit log and removes a file.
	if err := db.adm.Enter(); err != nil {
		return out, err
	}
	defer db.adm.LeaveGate()
	if err := db.beginRead(ctx); err != nil {
		return out, err
	}
	defer db.endRead()
	db.compactMu.Lock()
	defer db.compactMu.Unlock()

	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." || !strings.HasSuffix(name, ".snap") {
		return out, errs.New(errs.CodeInvalidInput, "%q is not the name of a snapshot file in %s", name, snapshot.DirName)
	}
	path := db.fs.PathJoin(db.SnapshotsDir(), name)
	created, _, err := db.auditedSnapshotLog()
	if err != nil {
		return out, err
	}
	recorded, audited := created[name]
	out.Name = name
	if _, err := fsutil.Regular(db.fs, path, false); err != nil {
		switch {
		case oserrorIsNotExist(err) && audited:
			// Deleted by hand: verify reports the audited snapshot missing
			// until its removal is on record.
			out.Finding = Finding{Code: errs.CodeSnapshotCorrupted, Reason: errs.CodeSnapshotCorrupted.Reason(), File: path,
				Message: "the audit log records snapshot " + name + ", and its file is missing"}
			return out, db.appendAudit(retireEntry(db, recorded, out.Finding, "the file was gone already"))
		case oserrorIsNotExist(err):
			return out, errs.New(errs.CodeDependencyMissing, "no snapshot %s in %s, nor one the audit log records", name, db.SnapshotsDir())
		case fsutil.IsEntryError(err):
			return out, errs.Wrap(errs.CodeInvalidInput, err, "snapshot %s", name)
		}
		return out, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", path)
	}
	_, verr := db.verifySnapshot(ctx, path, true)
	if verr == nil {
		return out, errs.New(errs.CodeInvalidInput, "snapshot %s passes its checks: only a snapshot that fails them is retired (compaction deletes snapshots beyond keep_snapshots)", name)
	}
	var e *Error
	if !errors.As(verr, &e) || e.Code != errs.CodeSnapshotCorrupted {
		return out, verr
	}
	out.Finding = Finding{Code: e.Code, Reason: e.Code.Reason(), File: path, Offset: e.Offset, Message: errs.Message(verr)}

	// The audit line names what the log vouched for, when it did; else the
	// file as it is.
	item := recorded
	if !audited {
		hash, size, err := snapshot.PresentFileHash(db.fs, path)
		if err != nil {
			return out, err
		}
		item = snapshot.AuditItem{Kind: "snapshot", Name: name, Bytes: size, Hash: hash}
	}
	lf := db.fs.PathJoin(db.dir, LostAndFound)
	moved := fmt.Sprintf("%s-%d.retired", name, db.opts.Clock().UnixNano())
	for i := 1; ; i++ {
		if _, err := db.fs.Stat(db.fs.PathJoin(lf, moved)); oserrorIsNotExist(err) {
			break
		}
		moved = fmt.Sprintf("%s-%d-%d.retired", name, db.opts.Clock().UnixNano(), i)
	}
	out.MovedTo = db.fs.PathJoin(lf, moved)
	entry := retireEntry(db, item, out.Finding, fmt.Sprintf("moved to %s/%s", LostAndFound, moved))
	// Audited first, as every compaction action: a crash after the line
	// leaves the file where it was, no longer vouched for, and retiring it
	// again moves it.
	if err := db.appendAudit(entry); err != nil {
		return out, err
	}
	if err := db.fs.MkdirAll(lf, 0o755); err != nil {
		return out, errs.Wrap(errs.CodeWriteFailed, err, "create %s", lf)
	}
	if err := db.fs.Rename(path, out.MovedTo); err != nil {
		return out, errs.Wrap(errs.CodeWriteFailed, err, "move %s to %s", path, out.MovedTo)
	}
	if err := db.syncDir(lf); err != nil {
		return out, err
	}
	return out, db.syncDir(db.SnapshotsDir())
}

// retireEntry is the audit line of a retirement: the snapshot removed, and
// a note naming the finding and what became of the file.
func retireEntry(db *DB, item snapshot.AuditItem, f Finding, what string) snapshot.AuditEntry {
	return snapshot.AuditEntry{Time: db.opts.Clock(), Action: snapshot.AuditRetireSnapshot, Removed: []snapshot.AuditItem{item},
		Note: fmt.Sprintf("retired: %s %s: %s; %s", f.Code, f.Reason, f.Message, what)}
}
