package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/engine/internal/scratch"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Snapshots (SPEC §6): the key-value state at a frontier in one file under
// <dir>/snapshots, written atomically by the snapshot package.

// SnapshotsDir returns the directory that holds the database's snapshots.
func (db *DB) SnapshotsDir() string { return db.fs.PathJoin(db.dir, snapshot.DirName) }

// CreateSnapshot writes the state at the current frontier. The state and the
// frontier are read from one Pebble snapshot of the index, so they agree;
// values too large to be inline are read from their segments. policyRef is
// recorded in the file ("" for none).
//
// The new snapshot's name, file hash and state hash go to the audit log: a
// snapshot whose log is later truncated below its frontier can no longer be
// proved by replay, and verify then holds it to that entry.
func (db *DB) CreateSnapshot(ctx context.Context, policyRef string) (snapshot.Info, error) {
	if err := db.writable(); err != nil {
		return snapshot.Info{}, err
	}
	// The audit append after the file writes the index: Close waits.
	if err := db.beginRead(ctx); err != nil {
		return snapshot.Info{}, err
	}
	defer db.endRead()
	db.compactMu.Lock() // the audit log has one writer at a time
	defer db.compactMu.Unlock()
	return db.createSnapshotAudited(ctx, snapshot.AuditEntry{PolicyRef: policyRef})
}

// createSnapshotAudited writes a snapshot into the database and appends
// entry, completed with it, to the audit log. The caller holds compactMu.
func (db *DB) createSnapshotAudited(ctx context.Context, entry snapshot.AuditEntry) (snapshot.Info, error) {
	info, err := db.CreateSnapshotTo(ctx, db.fs, db.SnapshotsDir(), entry.PolicyRef)
	if err != nil {
		return info, err
	}
	entry.Time, entry.Action = db.opts.Clock(), string(snapshot.ActionCreateSnapshot)
	entry.Added = append(entry.Added, snapshot.SnapshotItem(info))
	if err := db.appendAudit(entry); err != nil {
		// Not left behind unaudited (a crash here still can: a compaction
		// adopts such a snapshot, proved by replay, before it cuts below it).
		_ = snapshot.Delete(db.fs, info.Path)
		return snapshot.Info{}, err
	}
	return info, nil
}

// CreateSnapshotTo is CreateSnapshot writing to another directory or
// filesystem (an export, or a benchmark that leaves the disk out). A
// snapshot written elsewhere is not one the database uses.
func (db *DB) CreateSnapshotTo(ctx context.Context, fs vfs.FS, dir, policyRef string) (snapshot.Info, error) {
	// NB: it writes nothing of the database's: a read-only open exports too.
	if err := db.writable(); err != nil && !errors.Is(err, errClosed) && !errors.Is(err, ErrReadOnly) {
		return snapshot.Info{}, err
	}
	if err := db.beginRead(ctx); err != nil {
		return snapshot.Info{}, err
	}
	defer db.endRead()
	snap := db.index.NewSnapshot()
	defer snap.Close()
	// NB: the file is durable once Create returns, so the records it names
	// must be too: a NoSync group is applied to the index before its journal
	// block is fsynced, and a power loss would leave a snapshot whose
	// frontier the log no longer holds. Every group the Pebble snapshot
	// holds is applied, so a sync to the last applied group covers them.
	if err := db.syncIndexedJournal(); err != nil {
		return snapshot.Info{}, db.fail(errs.Wrap(errs.CodeWriteFailed, err, "journal fdatasync before a snapshot"))
	}
	front, err := db.frontierAt(ctx, snap)
	if err != nil {
		return snapshot.Info{}, err
	}
	meta := snapshot.Meta{Frontier: front, PolicyRef: policyRef, Created: db.opts.Clock()}
	info, err := snapshot.Create(fs, dir, meta, db.stateEntries(ctx, snap, front))
	if err != nil {
		return info, err
	}
	return info, nil
}

// frontierAt reads every anchor's head (seq and hash) from r.
func (db *DB) frontierAt(ctx context.Context, r pebble.Reader) (snapshot.Frontier, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagAnchor}, UpperBound: []byte{schema.TagAnchor + 1}})
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	var ids []string
	for ok := it.First(); ok; ok = it.Next() {
		ids = append(ids, string(it.Key()[1:]))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "read anchors")
	}
	f := snapshot.Frontier{}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		prefix := schema.AnchorPrefix(schema.TagSeq, id)
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: schema.PrefixEnd(prefix)})
		if err != nil {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
		}
		if it.Last() {
			row, _, derr := decodeSeqRow(prefix, it.Key(), it.Value())
			if derr != nil {
				_ = it.Close()
				return nil, derr
			}
			f[id] = snapshot.Head{Seq: row.seq, Hash: row.Hash}
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "read anchor %q", id)
		}
	}
	return f, nil
}

// stateEntries streams the live keys of r in byte order with their newest
// version. An entry's slices are only valid until the next one: the loop
// reuses its buffers and hands out inline values in place, which
// snapshot.Create allows, so a snapshot costs no allocation per key.
// anchors names the frontier's anchors, whose ids the entries share.
func (db *DB) stateEntries(ctx context.Context, r pebble.Reader, anchors snapshot.Frontier) iter.Seq2[snapshot.Entry, error] {
	return func(yield func(snapshot.Entry, error) bool) {
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte{schema.TagKey}, UpperBound: []byte{schema.TagKey + 1}})
		if err != nil {
			yield(snapshot.Entry{}, errs.Wrap(errs.CodeWriteFailed, err, "index iterator"))
			return
		}
		defer it.Close()
		ids := make(map[string]string, len(anchors))
		for id := range anchors {
			ids[id] = id
		}
		var key, anchorBytes, next []byte
		for ok := it.First(); ok; {
			if err := ctx.Err(); err != nil {
				yield(snapshot.Entry{}, err)
				return
			}
			var counter uint64
			key, anchorBytes, counter, err = schema.AppendVersionKeyParts(key[:0], anchorBytes[:0], it.Key())
			if err != nil {
				yield(snapshot.Entry{}, errs.Wrap(errs.CodeIndexMismatch, err, "read index"))
				return
			}
			ve, err := schema.DecodeVersion(it.Value())
			if err != nil {
				yield(snapshot.Entry{}, errs.Wrap(errs.CodeIndexMismatch, err, "key %q", key))
				return
			}
			anchor, known := ids[string(anchorBytes)]
			if !known {
				// Not in the frontier: snapshot.Create refuses it.
				anchor = string(anchorBytes)
			}
			if ve.Type != schema.VersionDelete {
				value := ve.Value
				if !ve.Inline {
					rec, err := db.readVersionFrame(ctx, anchor, counter, &ve)
					if err != nil {
						yield(snapshot.Entry{}, err)
						return
					}
					value = rec.Value
				}
				e := snapshot.Entry{Key: key, Value: value, Version: snapshot.Version{
					Anchor: anchor, Seq: ve.Seq, Counter: counter, Time: ve.Time, Hash: ve.Hash}}
				if !yield(e, nil) {
					return
				}
			}
			next = schema.AppendPastVersions(next[:0], key)
			ok = schema.NextKey(it, next)
		}
		if err := it.Error(); err != nil {
			yield(snapshot.Entry{}, errs.Wrap(errs.CodeWriteFailed, err, "read index"))
		}
	}
}

// Snapshots lists the database's snapshots, oldest first. A file that cannot
// be read is listed with Err set (INT_003).
func (db *DB) Snapshots(ctx context.Context) ([]snapshot.Info, error) {
	return snapshot.List(db.fs, db.SnapshotsDir())
}

// SnapshotVerification is the outcome of VerifySnapshot.
type SnapshotVerification struct {
	Info snapshot.Info `json:"snapshot"`
	// Base names the older snapshot the replay started from, when the log
	// below it was truncated; "" when the replay started at genesis.
	Base string `json:"base,omitempty"`
	// Replayed is false when no replay was possible: the log below this
	// snapshot's frontier was truncated and no older snapshot covers the
	// cut. The file and its state hash were still checked.
	Replayed bool   `json:"replayed"`
	Note     string `json:"note,omitempty"`
	// Audited is true when the audit log records the snapshot as created,
	// with its file and state hashes: one of the database's own, which
	// compaction counts. A snapshot it does not record is still proved by
	// its replay, but compaction neither counts nor deletes it (a crash
	// between a snapshot's file and its audit line leaves one; the next
	// compaction that cuts the log adopts it).
	Audited bool `json:"audited"`
	// ReplayedRecords is how many records the replay proof applied.
	ReplayedRecords uint64       `json:"replayed_records"`
	ReplayStateHash segment.Hash `json:"replay_state_hash"`
}

// VerifySnapshot checks a snapshot file (its hashes and every entry) and
// proves it by replay: the log is replayed in merged order up to the
// snapshot's frontier and must give the same state hash, and the frontier's
// head hashes must be the log's. Any failure is INT_003 naming the file.
// The replay keeps its state in a scratch Pebble store beside the index, so
// memory does not grow with the state.
//
// Below a truncation the replay starts from an older snapshot (Base), which
// must be one the audit log records as created with its file and state
// hashes. When no replay is possible (Replayed false, Note says why) the
// snapshot itself must be so recorded: its hashes are unkeyed, so anyone
// can write a well-formed snapshot, and once the log below it is gone only
// the audit log says which one is the database's (INT_003 otherwise).
func (db *DB) VerifySnapshot(ctx context.Context, path string) (SnapshotVerification, error) {
	return db.verifySnapshot(ctx, path, true)
}

// verifySnapshot is VerifySnapshot; with held false, a snapshot that cannot
// be replayed is not held to the audit log (a compaction about to adopt one
// the log lacks, which then refuses it with STATE_003).
func (db *DB) verifySnapshot(ctx context.Context, path string, held bool) (SnapshotVerification, error) {
	var out SnapshotVerification
	if err := db.beginRead(ctx); err != nil {
		return out, err
	}
	defer db.endRead()
	info, err := snapshot.Verify(db.fs, path)
	out.Info = info
	if err != nil {
		return out, err
	}
	bad := func(format string, args ...any) error {
		e := errs.New(errs.CodeSnapshotCorrupted, format, args...)
		e.File = path
		return e
	}
	f := merge.Frontier(info.Frontier.Seqs())
	for _, id := range f.Anchors() {
		e, ok, err := db.location(id, f[id])
		if err != nil {
			return out, err
		}
		if !ok {
			return out, bad("snapshot frontier names seq %d of anchor %q, which the log does not hold", f[id], id)
		}
		if e.Hash != info.Frontier[id].Hash {
			return out, bad("snapshot frontier says anchor %q seq %d has hash %s; the log says %s", id, f[id], info.Frontier[id].Hash, e.Hash)
		}
	}
	// What the audit log vouches for, read once, when first needed.
	var vouched map[string]snapshot.AuditItem
	var unvouched string // why the log vouches for nothing
	readAudit := false
	loadVouchers := func() error {
		if !readAudit {
			readAudit = true
			var err error
			if vouched, unvouched, err = db.vouchedSnapshots(); err != nil {
				return err
			}
		}
		return nil
	}
	// NB: a file under a name the audit log records with other hashes is
	// not the snapshot the database wrote, whatever its replay gives: the
	// bytes no hash of its state covers (its creation time, which dates
	// the time trigger, its policy_ref) are not the recorded ones either.
	if err := loadVouchers(); err != nil {
		return out, err
	}
	if it, ok := vouched[info.Name]; ok && (it.Hash != info.FileHash || it.StateHash != info.StateHash) {
		return out, otherHashes(info, it)
	}
	out.Audited = vouches(vouched, info)
	// noReplay ends the check of a snapshot no replay can prove.
	noReplay := func(note string) (SnapshotVerification, error) {
		out.Note = note
		if !held {
			return out, nil
		}
		if err := loadVouchers(); err != nil {
			return out, err
		}
		if !vouches(vouched, info) {
			why := "the audit log records no snapshot of that name with its file and state hashes"
			if unvouched != "" {
				why = "the audit log cannot vouch for it: " + unvouched
			}
			return out, bad("snapshot %s cannot be proved by replay (%s), and %s", info.Name, note, why)
		}
		out.Note += "; the audit log records its creation with these hashes"
		return out, nil
	}
	// Where the log starts: after a truncation the replay needs a base.
	var base *snapshot.Info
	for _, id := range f.Anchors() {
		first, err := db.firstPresent(id)
		if err != nil {
			return out, err
		}
		if first == 1 {
			continue
		}
		if base == nil {
			if err := loadVouchers(); err != nil {
				return out, err
			}
			if base, err = db.replayBase(ctx, path, info.FileHash, f, vouched); err != nil {
				return out, err
			}
		}
		if base == nil || base.Frontier[id].Seq+1 < first {
			return noReplay(fmt.Sprintf("no replay: the log of anchor %q below seq %d was truncated and no older snapshot the audit log records covers the cut; the file and its state hash verify", id, first))
		}
	}
	var after merge.Frontier
	var last mergedPos // the last record inside base's frontier, in merged order
	if base != nil {
		out.Base = base.Name
		after = merge.Frontier(base.Frontier.Seqs())
		if last, err = db.lastInMergedOrder(after); err != nil {
			return out, err
		}
	}
	n, sum, err := db.replayState(ctx, f, base, after, last)
	if errors.Is(err, errBaseOrder) {
		return noReplay(fmt.Sprintf("no replay: %v; the log below the cut was truncated, and the file and its state hash verify", err))
	}
	out.ReplayedRecords, out.ReplayStateHash, out.Replayed = n, sum, err == nil
	if err != nil {
		return out, err
	}
	if sum != info.StateHash {
		return out, bad("replaying %d records to the snapshot's frontier gives state hash %s; the snapshot says %s", n, sum, info.StateHash)
	}
	return out, nil
}

// cutOf returns firstPresent of the anchor, cached: it changes only when
// compaction truncates the anchor (truncateSegment forgets the entry). The
// caller holds db.truncating for reading, so no truncation applies its
// batch between the index read and the store.
func (db *DB) cutOf(anchor string) (uint64, error) {
	db.cutsMu.Lock()
	v, ok := db.cuts[anchor]
	db.cutsMu.Unlock()
	if ok {
		return v, nil
	}
	v, err := db.firstPresent(anchor)
	if err != nil {
		return 0, err
	}
	db.cutsMu.Lock()
	db.cuts[anchor] = v
	db.cutsMu.Unlock()
	return v, nil
}

// firstPresent returns the first seq of the anchor whose record is still in
// a segment (1 unless compaction truncated the log).
func (db *DB) firstPresent(anchor string) (uint64, error) {
	prefix := schema.AnchorPrefix(schema.TagSeq, anchor)
	it, err := db.index.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: schema.PrefixEnd(prefix)})
	if err != nil {
		return 0, errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		row, _, err := decodeSeqRow(prefix, it.Key(), it.Value())
		if err != nil {
			return 0, err
		}
		if row.Size != 0 {
			return row.seq, nil
		}
	}
	return 1, ioErr(it.Error(), "read index")
}

// vouchedSnapshots returns the snapshots the audit log vouches for
// (auditedSnapshots). A log that cannot be read as the database's vouches
// for nothing: the map is nil and why says so (verify reports the log
// itself); an I/O failure is returned.
func (db *DB) vouchedSnapshots() (vouched map[string]snapshot.AuditItem, why string, err error) {
	vouched, err = db.auditedSnapshots()
	if err != nil {
		if c := errs.CodeOf(err); c.IsIntegrity() {
			return nil, errs.Message(err), nil
		}
		return nil, "", err
	}
	return vouched, "", nil
}

// vouches reports whether vouched holds the snapshot with its file and
// state hashes.
func vouches(vouched map[string]snapshot.AuditItem, info snapshot.Info) bool {
	it, ok := vouched[info.Name]
	return ok && it.Hash == info.FileHash && it.StateHash == info.StateHash
}

// replayBase picks the newest snapshot other than path whose frontier lies
// within f, which verifies and which the audit log vouches for: the state a
// replay can start from. A file with the snapshot's own file hash is the
// snapshot (however its path is spelled) or a copy of it: a replay from it
// proves nothing about it.
//
// NB: the base's state is taken as it is, not replayed, so it must be the
// database's. Its file hash and frontier prove nothing (anyone can write a
// well-formed snapshot of this log's frontier with other values), and a
// pair of rewritten snapshots, the newer replayed from the older, would
// prove each other. The audit log's record of its creation is what does: a
// compaction records every snapshot it keeps before cutting below it.
func (db *DB) replayBase(ctx context.Context, path string, self segment.Hash, f merge.Frontier, vouched map[string]snapshot.AuditItem) (*snapshot.Info, error) {
	list, err := db.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		s := list[i]
		if s.Err != nil || s.Path == path || !f.Covers(merge.Frontier(s.Frontier.Seqs())) {
			continue
		}
		v, err := snapshot.Verify(db.fs, s.Path)
		if err != nil || v.FileHash == self || !vouches(vouched, v) {
			continue
		}
		// A base must be of this log: its frontier's head hashes are the
		// log's (a well-formed snapshot of another history is not).
		match, err := db.frontierMatchesLog(v.Frontier)
		if err != nil {
			return nil, err
		}
		if match {
			return &v, nil
		}
	}
	return nil, nil
}

// frontierMatchesLog reports whether every head a snapshot's frontier names
// is the log's record at that seq.
func (db *DB) frontierMatchesLog(front snapshot.Frontier) (bool, error) {
	for id, h := range front {
		e, ok, err := db.location(id, h.Seq)
		if err != nil {
			return false, err
		}
		if !ok || e.Hash != h.Hash {
			return false, nil
		}
	}
	return true, nil
}

// mergedPos is a record's place in merged order (SPEC §1).
type mergedPos struct {
	counter uint64
	anchor  string
}

func (p mergedPos) before(q mergedPos) bool {
	return p.counter < q.counter || p.counter == q.counter && p.anchor < q.anchor
}

// lastInMergedOrder returns the place of the last record inside f in merged
// order: within an anchor counters rise with seq, so it is the greatest of
// the frontier's heads.
func (db *DB) lastInMergedOrder(f merge.Frontier) (mergedPos, error) {
	var last mergedPos
	for _, id := range f.Anchors() {
		e, ok, err := db.location(id, f[id])
		if err != nil {
			return last, err
		}
		if !ok {
			return last, errs.New(errs.CodeIndexMismatch, "no 's' row for anchor %q seq %d", id, f[id])
		}
		if p := (mergedPos{e.Counter, id}); last.before(p) {
			last = p
		}
	}
	return last, nil
}

// openScratch opens a throwaway Pebble store (engine/internal/scratch)
// under the database's tmp directory, which Open clears should a process
// end before the store is closed; a read-only open writes nothing under the
// database and puts it outside. Close closes and removes it.
func (db *DB) openScratch(purpose string) (*scratch.Store, error) {
	log := pebbleLogger{l: db.opts.Logger}
	if db.ro != nil {
		return scratch.OpenOutside(db.fs, purpose, log) // nothing under a read-only database
	}
	return scratch.Open(db.fs, db.dir, purpose, log)
}

// errBaseOrder stops a replay from a base that a record after the base's
// frontier sorts before: the base's state already holds what merged order
// puts after that record, so the base cannot be a prefix of the replay.
var errBaseOrder = errors.New("a record after the base snapshot's frontier sorts before the base's last record")

// replayState replays the merged log up to f — starting from base's state
// and after its frontier when base is set — into a scratch store and returns
// the number of records applied and the state hash of the result.
//
// Starting from base is a shortcut that holds only when every record after
// base's frontier sorts after last, the last record inside it: merged order
// is by (counter, anchor id) and a caller may choose counters, so a record
// appended after the base was taken can sort before records in it. The
// replay then stops with errBaseOrder.
func (db *DB) replayState(ctx context.Context, f merge.Frontier, base *snapshot.Info, after merge.Frontier, last mergedPos) (uint64, segment.Hash, error) {
	st, err := db.openScratch("replay")
	if err != nil {
		return 0, segment.Hash{}, err
	}
	defer st.Close()
	b := st.NewBatch()
	if base != nil {
		s, err := snapshot.Open(db.fs, base.Path)
		if err != nil {
			return 0, segment.Hash{}, err
		}
		for e, err := range s.Entries() {
			if err != nil {
				_ = s.Close()
				return 0, segment.Hash{}, err
			}
			_ = b.Set(e.Key, e.Value, nil)
			if b.Len() > 4<<20 {
				if err := b.Commit(pebble.NoSync); err != nil {
					_ = s.Close()
					return 0, segment.Hash{}, errs.Wrap(errs.CodeWriteFailed, err, "replay store")
				}
				_ = b.Close()
				b = st.NewBatch()
			}
		}
		_ = s.Close()
	}
	var n uint64
	for p, err := range db.merged(ctx, MergedOptions{Frontier: f, After: after}, skipTruncated) {
		if err != nil {
			_ = b.Close()
			return n, segment.Hash{}, err
		}
		rec := p.Record
		if base != nil && n == 0 && !last.before(mergedPos{rec.Counter, rec.Anchor}) {
			_ = b.Close()
			return n, segment.Hash{}, fmt.Errorf("%w (anchor %q seq %d, counter %d)", errBaseOrder, rec.Anchor, rec.Seq, rec.Counter)
		}
		switch rec.Type {
		case segment.TypePut:
			_ = b.Set(rec.Key, rec.Value, nil)
		case segment.TypeDelete:
			_ = b.Delete(rec.Key, nil)
		}
		n++
		if b.Len() > 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return n, segment.Hash{}, errs.Wrap(errs.CodeWriteFailed, err, "replay store")
			}
			_ = b.Close()
			b = st.NewBatch()
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return n, segment.Hash{}, errs.Wrap(errs.CodeWriteFailed, err, "replay store")
	}
	_ = b.Close()
	h := snapshot.NewStateHasher()
	it, err := st.NewIter(nil)
	if err != nil {
		return n, segment.Hash{}, errs.Wrap(errs.CodeWriteFailed, err, "replay store")
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := h.Add(it.Key(), it.Value()); err != nil {
			_ = it.Close()
			return n, segment.Hash{}, err
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return n, segment.Hash{}, errs.Wrap(errs.CodeWriteFailed, err, "replay store")
	}
	return n, h.Sum(), nil
}
