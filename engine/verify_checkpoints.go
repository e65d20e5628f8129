package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/anchordb/anchordb/engine/internal/treestore"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// checkCheckpoints checks the checkpoints stored in the database: each is a
// well-formed signed note of this database (signed by one of VerifierKeys,
// when given); each anchor it lists exists, is at least that long, and has
// that root at that size in the chain; and each extends the one before it.
// The trusted checkpoint of an incremental check gets the same checks.
// A file under a name the audit log records as a stored checkpoint must be
// the file recorded there (AUTH_003 otherwise): without a key that is what
// shows a checkpoint of the database's replaced by one of the same body
// signed by someone else. A file the log does not record is no finding (a
// crash between the file and its line leaves one, and checkpoints stored
// before they were audited are all such), but it bounds no cut
// (ckpttrust.go).
func (v *verifier) checkCheckpoints() {
	origin := proof.CheckpointOrigin(v.db.id)
	var recorded map[string]snapshot.AuditItem
	var err error
	if !v.files { // the audit log's head is in the index
		recorded, err = v.db.auditedCheckpoints()
	}
	if err != nil {
		if !errs.CodeOf(err).IsIntegrity() {
			v.fail(err)
			return
		}
		recorded = nil // a log that vouches for nothing; checkSnapshots reports it
	}
	var prev *StoredCheckpoint
	for i := range v.stored {
		if v.halted() {
			return
		}
		s := &v.stored[i]
		v.checkCheckpointName(s, i)
		if s.Err != nil {
			v.report(Finding{Code: errs.CodeSignatureInvalid, File: s.Path, Message: fmt.Sprintf("stored checkpoint is not a well-formed signed checkpoint: %s", errs.Message(s.Err))})
			continue
		}
		if len(v.opts.VerifierKeys) > 0 {
			if _, err := proof.OpenCheckpoint(s.Note, v.opts.VerifierKeys...); err != nil {
				code := errs.CodeOf(err)
				if code != errs.CodeHashMismatch {
					code = errs.CodeSignatureInvalid
				}
				v.report(Finding{Code: code, File: s.Path, Message: fmt.Sprintf("stored checkpoint: %s", errs.Message(err))})
				continue
			}
		}
		// NB: after the checks above, and only when they found nothing in
		// the file: a file they already fail (a time line edited, a
		// signature re-spelled) is one finding, not two.
		if it, ok := recorded[s.Name]; ok && !v.reportedAt(s.Path) {
			if h := snapshot.CheckpointFileHash(s.Note); h != it.Hash {
				v.report(Finding{Code: errs.CodeSignatureInvalid, File: s.Path,
					Message: fmt.Sprintf("stored checkpoint is not the one the database stored under its name: its bytes hash to %s, the audit log records %s", h, it.Hash)})
			}
		}
		cp := s.Checkpoint
		if cp.Origin != origin && v.db.id != "" {
			v.report(Finding{Code: errs.CodeSignatureInvalid, File: s.Path, Message: fmt.Sprintf("stored checkpoint is of %q, this database is %q", cp.Origin, origin)})
			continue
		}
		for _, e := range cp.Entries {
			v.checkEntry(e, s.Path)
		}
		if prev != nil {
			if err := proof.CheckConsistent(v.ctx, prev.Checkpoint, cp, nil); err != nil && v.ctx.Err() == nil {
				v.report(Finding{Code: errs.CodeChainBroken, File: s.Path, Message: fmt.Sprintf("stored checkpoint contradicts the one before it (%s): %s", prev.Name, errs.Message(err))})
			}
		}
		prev = s
	}
	if from := v.opts.From; from != nil {
		for _, e := range from.Entries {
			if c := v.byID[e.Anchor]; c == nil || !c.fromRoot {
				v.checkEntry(e, "")
			}
		}
	}
}

// checkEntry checks one checkpoint entry against the anchor's chain.
func (v *verifier) checkEntry(e proof.Entry, file string) {
	c := v.byID[e.Anchor]
	if c == nil {
		if !v.restricted && !v.known[e.Anchor] {
			v.report(Finding{Code: errs.CodeChainBroken, Anchor: e.Anchor, Seq: e.Size, File: file,
				Message: fmt.Sprintf("the checkpoint lists anchor %q with %s; the database does not have it", e.Anchor, plural(e.Size, "record"))})
		}
		return
	}
	if !c.complete {
		return
	}
	if e.Size > c.last {
		c.reportClaim(errs.CodeChainBroken, c.last+1, file, 0, "the checkpoint lists %d records of the anchor; the database has %d", e.Size, c.last)
		return
	}
	if root, ok := c.roots[e.Size]; ok {
		if root != e.Root {
			c.reportClaim(errs.CodeHashMismatch, e.Size, file, 0, "the chain's tree of size %d has root %s; the checkpoint says %s", e.Size, root, e.Root)
		}
		return
	}
	if c.from == nil || !c.fromRoot || e.Size >= c.from.Size {
		return // the tree is broken before this size, which is already a finding
	}
	// Below the trusted size of an incremental check: prove the entry's
	// tree a prefix of the trusted one.
	path, err := proof.Consistency(v.ctx, treestore.Index{R: v.snap, Anchor: e.Anchor}, e.Size, c.from.Size)
	if err == nil {
		if e.Size == 0 {
			return
		}
		err = proof.MerkleError(merkleproof.VerifyConsistency(segment.Blake3RFC6962, e.Size, c.from.Size, path, e.Root[:], c.from.Root[:]))
	}
	if err != nil {
		if errs.CodeOf(err) == errs.CodeWriteFailed {
			v.fail(err)
			return
		}
		c.reportClaim(errs.CodeHashMismatch, e.Size, file, 0, "the checkpoint's tree of size %d (root %s) is not a prefix of the trusted tree of size %d: %s", e.Size, e.Root, c.from.Size, errs.Message(err))
	}
}

// checkCheckpointName checks what a stored checkpoint's file name records
// of it when it was stored: its place in the sequence (1, 2, 3, …, each
// once; the oldest may have been removed, none in the middle) and its time, which
// is also in its signed body. Without a verifier key, these are what shows
// a checkpoint deleted from the middle, or a body edited after signing.
func (v *verifier) checkCheckpointName(s *StoredCheckpoint, i int) {
	seq := checkpointSeq(s.Name)
	if i > 0 {
		prev := checkpointSeq(v.stored[i-1].Name)
		switch {
		case prev != 0 && seq > prev+1:
			v.report(Finding{Code: errs.CodeChainBroken, File: s.Path,
				Message: fmt.Sprintf("stored checkpoints %d to %d are missing: the one before this is %s", prev+1, seq-1, v.stored[i-1].Name)})
		case prev != 0 && seq != 0 && seq <= prev:
			// NB: the database stores each number once. A second file
			// under one is not one it stored there: a copy of an older
			// checkpoint, say, which extends the one before it and is
			// extended by the one after, so nothing else shows it.
			v.report(Finding{Code: errs.CodeChainBroken, File: s.Path,
				Message: fmt.Sprintf("stored checkpoint number %d appears more than once: the one before this is %s", seq, v.stored[i-1].Name)})
		}
	}
	if s.Err != nil {
		return
	}
	_, stamp, ok := strings.Cut(strings.TrimSuffix(s.Name, checkpointExt), "-")
	at, err := time.Parse(checkpointTimeLayout, stamp)
	if seq == 0 || !ok || err != nil {
		v.report(Finding{Code: errs.CodeSignatureInvalid, File: s.Path,
			Message: fmt.Sprintf("stored checkpoint's file name %q is not the sequence number and time it was stored under", s.Name)})
		return
	}
	if !at.Equal(s.Checkpoint.Time) {
		v.report(Finding{Code: errs.CodeSignatureInvalid, File: s.Path,
			Message: fmt.Sprintf("stored checkpoint says it was taken at %s; it was stored as taken at %s, so its body was changed after it was signed",
				s.Checkpoint.Time.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))})
	}
}

// reportedAt reports whether a finding names the file at path.
func (v *verifier) reportedAt(path string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, f := range v.findings {
		if f.File == path {
			return true
		}
	}
	return false
}
