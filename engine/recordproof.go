package engine

import (
	"context"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
)

// RecordProof is everything a verifier needs to check one record against a
// signed checkpoint, without the database: the record, its inclusion proof
// in its anchor's tree at the size the checkpoint lists, and the signed
// checkpoint note. DB.ProveRecord makes one; RecordProof.Verify checks it
// with the checkpoint signer's verifier key alone.
type RecordProof struct {
	// Record is the record proved, whole: its hash is recomputed from
	// these fields when the proof is verified.
	Record Record
	// Inclusion proves the record's hash at Record.Seq in Record.Anchor's
	// tree of the size the checkpoint lists for the anchor.
	Inclusion *proof.InclusionProof
	// Note is the signed checkpoint note the proof is against, as
	// CreateCheckpoint returned it (and as checkpoints/ keeps it).
	Note []byte
}

// ProveRecord returns the proof of record seq of anchor against the signed
// checkpoint note (nil: the newest checkpoint the database stored): the
// record, read and checked as Record reads it, and its inclusion proof at
// the size the checkpoint lists for the anchor, which must be the
// database's own tree there.
//
// A note that is not a well-formed checkpoint is INPUT_001 (its signature
// is not checked here: Verify does that, with the verifier key); one of
// another database, or with no stored checkpoint, STATE_003. A record the
// checkpoint does not cover — an anchor it does not list, a seq past the
// size it lists — is STATE_003 (create a newer checkpoint), as is a record
// a compaction removed without keeping it; a checkpoint whose root for the
// anchor is not the database's tree at that size is INT_001.
func (db *DB) ProveRecord(ctx context.Context, anchor string, seq uint64, note []byte) (*RecordProof, error) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	if note == nil {
		latest, err := db.LatestCheckpoint(ctx)
		if err != nil {
			return nil, err
		}
		if latest == nil {
			return nil, errs.New(errs.CodeDependencyMissing, "the database has stored no checkpoint to prove record %d of anchor %q against (create one first)", seq, anchor).At(anchor, seq, "", 0)
		}
		note = latest.Note
	}
	cp, err := ParseCheckpointNote(note)
	if err != nil {
		return nil, err
	}
	if want := proof.CheckpointOrigin(db.ID()); cp.Origin != want {
		return nil, errs.New(errs.CodeDependencyMissing, "the checkpoint is of %s, not of this database (%s)", cp.Origin, want).At(anchor, seq, "", 0)
	}
	entry, ok := cp.Entry(anchor)
	if !ok {
		return nil, errs.New(errs.CodeDependencyMissing, "the checkpoint of %s does not list anchor %q (create a newer checkpoint)", cp.Time.Format(time.RFC3339Nano), anchor).At(anchor, seq, "", 0)
	}
	if seq > entry.Size {
		return nil, errs.New(errs.CodeDependencyMissing, "the checkpoint of %s lists %s of anchor %q: record %d is not in it (create a newer checkpoint)",
			cp.Time.Format(time.RFC3339Nano), plural(entry.Size, "record"), anchor, seq).At(anchor, seq, "", 0)
	}
	incl, err := db.ProveInclusion(ctx, anchor, seq, entry.Size)
	if err != nil {
		return nil, err
	}
	if incl.Root != entry.Root {
		return nil, errs.New(errs.CodeHashMismatch, "the checkpoint lists root %s for anchor %q at size %d; the database's tree there has root %s",
			entry.Root, anchor, entry.Size, incl.Root).At(anchor, entry.Size, "", 0)
	}
	rec, err := db.Record(ctx, anchor, seq)
	if err != nil {
		return nil, err
	}
	if rec.Hash != incl.Leaf {
		return nil, errs.New(errs.CodeIndexMismatch, "anchor %q record %d hashes to %s; its tree's leaf is %s", anchor, seq, rec.Hash, incl.Leaf).At(anchor, seq, "", 0)
	}
	return &RecordProof{Record: rec, Inclusion: incl, Note: append([]byte(nil), note...)}, nil
}

// Verify checks the proof against a signed checkpoint note and the
// verifier key of its signer (a note verifier key, as proof.GenerateKeys
// makes): the note's signature, the record's hash recomputed from its
// fields, the inclusion proof from that hash to a root, and that root and
// size being the ones the checkpoint lists for the anchor. It needs no
// database, and returns the checkpoint the record was verified against.
//
// note nil verifies against the note the proof carries (p.Note): a note
// is trusted for its signature under verifierKey, not for where it came
// from. Pass the note you hold to require that one.
//
// Errors: a signature that does not verify under the key is AUTH_003; a
// record whose hash or proof does not verify, or whose proof is not at the
// checkpoint's size and root, INT_001; a malformed note, key or proof
// INPUT_001.
func (p *RecordProof) Verify(note []byte, verifierKey string) (*proof.Checkpoint, error) {
	if note == nil {
		note = p.Note
	}
	if len(note) == 0 {
		return nil, errs.New(errs.CodeInvalidInput, "no checkpoint note to verify the record against")
	}
	cp, err := proof.OpenCheckpoint(note, verifierKey)
	if err != nil {
		return nil, err
	}
	incl, rec := p.Inclusion, &p.Record
	if incl == nil {
		return nil, errs.New(errs.CodeInvalidInput, "the record proof has no inclusion proof")
	}
	if err := segment.ValidateAnchorID(rec.Anchor); err != nil {
		return nil, err
	}
	if rec.Anchor != incl.Anchor || rec.Seq != incl.Seq {
		return nil, errs.New(errs.CodeHashMismatch, "the record is %q seq %d, its inclusion proof is of %q seq %d",
			rec.Anchor, rec.Seq, incl.Anchor, incl.Seq).At(rec.Anchor, rec.Seq, "", 0)
	}
	if h := rec.ComputeHash(); h != rec.Hash || h != incl.Leaf {
		return nil, errs.New(errs.CodeHashMismatch, "record %d of anchor %q hashes to %s; it says %s and its proof proves %s",
			rec.Seq, rec.Anchor, h, rec.Hash, incl.Leaf).At(rec.Anchor, rec.Seq, "", 0)
	}
	if err := proof.VerifyInclusionProof(incl); err != nil {
		return nil, err
	}
	if err := cp.Bind(proof.Verified{Kind: proof.KindInclusion, Inclusion: incl}); err != nil {
		return nil, err
	}
	return cp, nil
}
