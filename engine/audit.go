package engine

import (
	"bytes"
	"context"
	"fmt"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
)

// The audit log (SPEC §6: an append-only record of every applied action):
// appending a line, the head the index records for it, checking the log
// against that head, and which snapshots the log vouches for.

// appendAudit appends e to the audit log. The caller holds compactMu.
//
// The log must end at the database's own head (auditHead): a line past it
// is not the database's (the chain has no key), and a new line chained onto
// it would make it count. Before the line is written, which line it will be
// is made durable in the audit mark (auditmark.go), so an unclean stop that
// loses the head row still leaves the line recognisably the database's.
func (db *DB) appendAudit(e snapshot.AuditEntry) error {
	n, _, err := db.auditHead()
	if err != nil {
		return err
	}
	line, err := snapshot.AppendAfter(db.fs, db.AuditPath(), e, func(next snapshot.AuditEntry) error {
		// Append read the log's tail: the line to come must follow the
		// database's own head, not a line somebody else wrote.
		if next.Seq > n+1 {
			e := errs.New(errs.CodeChainBroken, "audit log has %s past the %d the database wrote; nothing more is appended to it", plural(next.Seq-1-n, "line"), n)
			e.File = db.AuditPath()
			return e
		}
		// Nor may it take the place of a line the database wrote: to the
		// log alone a damaged last line looks like a torn append, and a
		// lost one like one never written. Written over, the record of
		// what an action removed would be gone, and the head recorded
		// next would hide that from verify.
		if next.Seq <= n {
			e := errs.New(errs.CodeChainBroken, "audit log holds %d whole lines of the %d the database wrote: the last ones were lost or damaged; nothing more is appended to it", next.Seq-1, n)
			e.File = db.AuditPath()
			return e
		}
		return db.writeAuditMark(auditMark{seq: next.Seq, hash: next.Hash})
	})
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	// The head, kept in the index, is what tells a torn last line from an
	// altered or lost one.
	return db.index.Set(schema.MetaKey(schema.MetaAudit), schema.AppendAuditHead(nil, line.Seq, line.Hash), pebble.NoSync)
}

// auditHead returns how many lines of the audit log, and which last one,
// are the database's own: the head row, or a line past it that an audit
// mark names, when the log holds it with the mark's hash (an unclean stop
// can lose head rows after their lines were written; the lines before the
// marked one are the database's too, since each line's hash covers the
// one before it). A row that cannot be read is an empty head (a legacy or
// rebuilt index without one). A log that cannot be read (IO_001) is the
// error.
func (db *DB) auditHead() (uint64, segment.Hash, error) {
	var n uint64
	var h segment.Hash
	if rec, ok, err := db.metaBytes(schema.MetaAudit); err != nil {
		return 0, h, err
	} else if lines, last, good := schema.DecodeAuditHead(rec); ok && good {
		n, h = lines, last
	}
	marks, err := db.auditMarks()
	if err != nil {
		return n, h, err
	}
	// The index row an engine before the mark file wrote in its place.
	rec, ok, err := db.metaBytes(schema.MetaAuditNext)
	if err != nil {
		return n, h, err
	}
	if seq, next, good := schema.DecodeAuditHead(rec); ok && good {
		marks = append(marks, auditMark{seq: seq, hash: next})
	}
	marked := make(map[uint64]segment.Hash, len(marks))
	var last uint64
	for _, m := range marks {
		if m.seq > n {
			marked[m.seq] = m.hash
			last = max(last, m.seq)
		}
	}
	if len(marked) == 0 {
		return n, h, nil
	}
	for entry, err := range snapshot.ReadAudit(db.fs, db.AuditPath()) {
		if err != nil {
			// NB: a failed read says nothing of the line marked as
			// next: taken for missing, the database's own last line
			// counted as one past its head (a verify finding, an
			// append refused as INT_002).
			if !errs.CodeOf(err).IsIntegrity() {
				return n, h, err
			}
			return n, h, nil // verify reports the log
		}
		if hash, ok := marked[entry.Seq]; ok && hash == entry.Hash {
			n, h = entry.Seq, entry.Hash
		}
		if entry.Seq >= last {
			break
		}
	}
	return n, h, nil
}

// adoptedAuditHead is the head row a rebuilt index takes from the audit log
// as the log stands (nil for none): initIndex writes it with the format row
// that marks the rebuild done. The head is index data that no segment
// holds; without it a line lost from the log's end later would go
// unnoticed. What the log lost before the rebuild cannot be told any more.
// A log whose chain does not verify is left for verify to report, and gets
// no head; one that cannot be read is the error (IO_001).
func (db *DB) adoptedAuditHead() ([]byte, error) {
	head, err := snapshot.VerifyAudit(db.fs, db.AuditPath())
	if err != nil && !errs.CodeOf(err).IsIntegrity() {
		// NB: a read that failed is no broken chain. Taken for one, the
		// rebuilt index had no head for good: the format row written
		// after it marks the rebuild done, and no later Open adopts a
		// head. Failing here, before that row, the next Open rebuilds
		// again.
		return nil, err
	}
	if err != nil || head.Lines == 0 {
		return nil, nil
	}
	return schema.AppendAuditHead(nil, head.Lines, head.Head), nil
}

// catchUpAuditHead gives an older copy of the index (stale_index) the
// audit log's head as the log stands, when the log still holds the head
// the copy recorded: the lines after it are this database's, written after
// the copy was taken. Without it every later audited action was refused
// (INT_002, lines past those the database wrote) until rebuild-index. A log
// that does not hold the copy's head is left as it is, for verify to report.
func (db *DB) catchUpAuditHead() error {
	head, err := db.verifyAuditLog()
	if err != nil {
		if errs.CodeOf(err) == errs.CodeWriteFailed {
			return err
		}
		return nil
	}
	n, _, err := db.auditHead()
	if err != nil || head.Lines <= n {
		return err
	}
	if err := db.index.Set(schema.MetaKey(schema.MetaAudit), schema.AppendAuditHead(nil, head.Lines, head.Head), pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write index meta %s", schema.MetaAudit)
	}
	return nil
}

// VerifyAuditLog checks the audit log's hash chain and that it still holds
// every line the index saw appended: a line lost or altered at the end is
// INT_002, like one in the middle; an index record of the head that cannot
// be read is INT_004.
func (db *DB) VerifyAuditLog(ctx context.Context) (snapshot.AuditHead, error) {
	// The head row is an index read: Close waits for it, and refuses it
	// once closing (a read of the closed Pebble panics).
	if err := db.beginRead(ctx); err != nil {
		return snapshot.AuditHead{}, err
	}
	defer db.endRead()
	return db.verifyAuditLog()
}

// verifyAuditLog is VerifyAuditLog for callers in the read gate already
// (Verify) or before the database serves (Open).
func (db *DB) verifyAuditLog() (snapshot.AuditHead, error) {
	// The count of lines appended first, then the log: an append (under
	// compactMu, which this does not take) writes its line before it
	// counts it, and lines are only added, so every line counted is in the
	// log read after. Read the other way round, a line appended in between
	// was counted but not read: a sound log reported short (INT_002).
	rec, ok, err := db.metaBytes(schema.MetaAudit)
	if err != nil {
		return snapshot.AuditHead{}, err
	}
	head, err := snapshot.VerifyAudit(db.fs, db.AuditPath())
	if err != nil || !ok {
		return head, err
	}
	n, _, good := schema.DecodeAuditHead(rec)
	if !good {
		// NB: not "no head": the head is what tells a lost or altered last
		// line from a torn append, so one that cannot be read is a finding.
		e := errs.New(errs.CodeIndexMismatch, "the index's record of the audit log's head is %d bytes, not %d", len(rec), schema.AuditHeadSize)
		e.File = db.AuditPath()
		return head, e
	}
	if head.Lines < n {
		e := errs.New(errs.CodeChainBroken, "audit log has %s; %d were appended", plural(head.Lines, "line"), n)
		e.File = db.AuditPath()
		return head, e
	}
	for entry, err := range snapshot.ReadAudit(db.fs, db.AuditPath()) {
		if err != nil {
			return head, err
		}
		if entry.Seq == n {
			if !bytes.Equal(entry.Hash[:], rec[8:]) {
				e := errs.New(errs.CodeChainBroken, "audit log line %d is not the line that was appended", n)
				e.File, e.Seq = db.AuditPath(), n
				return head, e
			}
			break
		}
	}
	return head, nil
}

// checkKeptSnapshots makes sure, before a plan cuts a log, that every
// snapshot it keeps is still the one the audit log records: once the log
// below it is gone, only that entry says the snapshot is the database's
// (verify holds it to it). The plan counted only such snapshots; this
// reads them again, since a file can change between the plan and its
// application. One that no longer matches stops the plan (INT_003) before
// anything is changed. The caller holds compactMu.
func (db *DB) checkKeptSnapshots(plan snapshot.Plan) error {
	vouched, err := db.auditedSnapshots()
	if err != nil {
		return err
	}
	for _, name := range plan.Keep {
		path := db.fs.PathJoin(db.SnapshotsDir(), name)
		info, err := snapshot.Verify(db.fs, path)
		if err != nil {
			return fmt.Errorf("snapshot %s, kept below a cut: %w", name, err)
		}
		it, ok := vouched[name]
		if !ok {
			e := errs.New(errs.CodeSnapshotCorrupted, "snapshot %s, kept below a cut, is no longer one the audit log records as created; nothing is cut", name)
			e.File = path
			return e
		}
		if it.StateHash != info.StateHash || it.Hash != info.FileHash {
			e := otherHashes(info, it)
			e.Message += "; nothing is cut"
			return e
		}
	}
	return nil
}

// auditedSnapshots returns, by name, the snapshots the audit log records as
// created and not removed since, in the lines up to the head the index
// recorded: a line appended to the file by anyone else vouches for nothing.
func (db *DB) auditedSnapshots() (map[string]snapshot.AuditItem, error) {
	created, _, err := db.auditedSnapshotLog()
	return created, err
}

// auditedSnapshotLog returns, by name, the snapshots the audit log records
// as created and not removed since, and those it records as removed since
// they were created (with their file hashes). A file of the second kind is
// a leftover of a removal that was audited but did not happen (it failed,
// or a crash came first): not a snapshot the database keeps.
func (db *DB) auditedSnapshotLog() (created map[string]snapshot.AuditItem, removed map[string]segment.Hash, err error) {
	head, _, err := db.auditHead()
	if err != nil {
		return nil, nil, err
	}
	return db.auditedSnapshotsUpTo(head)
}

// auditedSnapshotsUpTo is auditedSnapshotLog reading the audit log's lines
// up to head (every line, for math.MaxUint64). A line that fails its check
// or does not link is returned as the error (INT_002).
func (db *DB) auditedSnapshotsUpTo(head uint64) (created map[string]snapshot.AuditItem, removed map[string]segment.Hash, err error) {
	created, removed = map[string]snapshot.AuditItem{}, map[string]segment.Hash{}
	for entry, err := range snapshot.ReadAudit(db.fs, db.AuditPath()) {
		if err != nil {
			return nil, nil, err
		}
		if entry.Seq > head {
			break
		}
		switch entry.Action {
		case string(snapshot.ActionCreateSnapshot):
			for _, it := range entry.Added {
				if it.Kind == "snapshot" {
					created[it.Name] = it
					delete(removed, it.Name)
				}
			}
		case string(snapshot.ActionDeleteSnapshot), snapshot.AuditRetireSnapshot:
			for _, it := range entry.Removed {
				if it.Kind == "snapshot" {
					delete(created, it.Name)
					removed[it.Name] = it.Hash
				}
			}
		}
	}
	return created, removed, nil
}
