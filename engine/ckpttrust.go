package engine

import (
	"context"
	"fmt"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/snapshot"
)

// Which files in checkpoints/ bound a truncation.
//
// SPEC §6 lets a truncation cut a log only where a checkpoint covers the
// cut: a signed root over the anchor's tree at a size at or above it, so
// that the record hashes the stubs keep can be checked against a root
// nobody can rewrite once the records are gone. Compaction holds no key and
// cannot check a signature, and a note's roots prove nothing about who
// wrote it: anyone who can read the log computes them. Until this file,
// compaction took the newest well-formed note of the database's origin
// whose roots were the log's: an unsigned one, one signed by another key or
// a signed body edited to the log's head, named as the next checkpoint,
// moved the cut past the one the database signed — every record up to the
// oldest kept snapshot went, with no signed root over it — and one with
// roots that are not the log's held every cut at zero.
//
// What says a file is one the database stored is the audit log, as for
// snapshots (snaptrust.go): CreateCheckpoint, once the file is durable and
// before it returns the note, appends a create_checkpoint line with the
// file's name and the BLAKE3 of its bytes. A file bounds a cut only when
//
//   - the audit log, in the lines up to the head the index recorded,
//     records a checkpoint of its name, and its bytes hash to the hash
//     recorded there;
//   - it is a well-formed checkpoint of this database's origin.
//
// Of the newest such file, each entry whose root is the anchor's tree at
// its size bounds that anchor's cut. Every other file — unsigned, signed by
// another key, edited, a copy of the database's own under another name,
// one stored before checkpoints were audited, one whose audit line a crash
// kept from being written — is neither counted nor deleted, and a plan
// under raw_log "truncate" names it when it is newer than the file that
// counts (what a reader, and the code before this, takes for the newest
// stored checkpoint; an older one steers nothing, and verify checks every
// file). Such a file can only be overlooked, never trusted: a cut waits
// for the next `checkpoint create`.

// maxCheckpointNotes bounds the plan notes that name, one each, the files
// in checkpoints/ that bound nothing; the older ones share one note. A
// database whose checkpoints predate their audit lines may hold thousands.
const maxCheckpointNotes = 5

// countedCheckpoints is the outcome of countCheckpoints.
type countedCheckpoints struct {
	// sizes is, per anchor, the tree size the newest checkpoint the
	// database stored signs with the anchor's root: how far a cut may go.
	// Never nil.
	sizes map[string]uint64
	// notes name the files that bound nothing, and why, for the plan.
	notes []string
}

// countCheckpoints sorts the files in checkpoints/ as the comment above
// says. Only a failure to read is an error.
func (db *DB) countCheckpoints(ctx context.Context) (countedCheckpoints, error) {
	out := countedCheckpoints{sizes: map[string]uint64{}}
	all, err := db.Checkpoints(ctx)
	if err != nil {
		return out, err
	}
	if len(all) == 0 {
		return out, nil
	}
	recorded, err := db.auditedCheckpoints()
	if err != nil {
		// NB: a log that cannot be read as the database's vouches for
		// nothing (verify reports the log itself); an I/O failure is one.
		if !errs.CodeOf(err).IsIntegrity() {
			return out, err
		}
		out.notes = append(out.notes, fmt.Sprintf("the audit log cannot vouch for any checkpoint (%s): none bounds a cut", errs.Message(err)))
		recorded = nil
	}
	origin := proof.CheckpointOrigin(db.id)
	type file struct{ name, why string }
	var unvouched []file // newest first
	for i := len(all) - 1; i >= 0; i-- {
		s := &all[i]
		if why := checkpointUnvouched(s, recorded, origin); why != "" {
			unvouched = append(unvouched, file{s.Name, why})
			continue
		}
		if err := db.boundBy(ctx, s.Checkpoint, out.sizes); err != nil {
			return out, err
		}
		break
	}
	if recorded == nil {
		return out, nil // the note above says it of them all
	}
	for i, u := range unvouched {
		if i == maxCheckpointNotes {
			out.notes = append(out.notes, fmt.Sprintf("%d older files in %s (%s to %s) are not checkpoints this database stored either: left alone, they bound no cut",
				len(unvouched)-i, CheckpointsDir, unvouched[len(unvouched)-1].name, u.name))
			break
		}
		out.notes = append(out.notes, fmt.Sprintf("checkpoint %s %s: left alone, it bounds no cut", u.name, u.why))
	}
	return out, nil
}

// checkpointUnvouched says why the stored file s is not a checkpoint the
// database stored, or "" when it is one.
func checkpointUnvouched(s *StoredCheckpoint, recorded map[string]snapshot.AuditItem, origin string) string {
	if s.Err != nil {
		return "is not a well-formed signed checkpoint (" + errs.Message(s.Err) + ")"
	}
	it, ok := recorded[s.Name]
	if !ok {
		return "is one the audit log does not record, so it is not known to be one this database signed (`checkpoint create` signs one it records)"
	}
	if h := snapshot.CheckpointFileHash(s.Note); h != it.Hash {
		return fmt.Sprintf("is not the file the audit log records under its name (its bytes hash to %s, the log records %s)", h, it.Hash)
	}
	if s.Checkpoint.Origin != origin {
		// NB: never stored by CreateCheckpoint, which signs this origin;
		// kept as a check, not a trust in the audit log's item alone.
		return fmt.Sprintf("is of %q, not this database (%q)", s.Checkpoint.Origin, origin)
	}
	return ""
}

// boundBy sets, for each entry of cp whose root is the anchor's tree at its
// size, the anchor's bound in sizes.
func (db *DB) boundBy(ctx context.Context, cp *proof.Checkpoint, sizes map[string]uint64) error {
	for _, e := range cp.Entries {
		root, _, err := db.AnchorRoot(ctx, e.Anchor, e.Size)
		if err != nil {
			if errs.CodeOf(err) == errs.CodeWriteFailed {
				return err
			}
			continue // not this database's tree at that size: covers nothing
		}
		if root == e.Root {
			sizes[e.Anchor] = e.Size
		}
	}
	return nil
}

// auditedCheckpoints returns, by file name, the checkpoints the audit log
// records as stored, in the lines up to the head the index recorded: a
// line appended to the file by anyone else vouches for nothing. A name
// recorded twice (a checkpoint whose file a failed audit append removed
// again, its name then taken by the next) is the later item. A line that
// fails its check or does not link is the error (INT_002).
func (db *DB) auditedCheckpoints() (map[string]snapshot.AuditItem, error) {
	head, _, err := db.auditHead()
	if err != nil {
		return nil, err
	}
	out := map[string]snapshot.AuditItem{}
	for entry, err := range snapshot.ReadAudit(db.fs, db.AuditPath()) {
		if err != nil {
			return nil, err
		}
		if entry.Seq > head {
			break
		}
		if entry.Action != snapshot.AuditCreateCheckpoint {
			continue
		}
		for _, it := range entry.Added {
			if it.Kind == snapshot.AuditKindCheckpoint {
				out[it.Name] = it
			}
		}
	}
	return out, nil
}
