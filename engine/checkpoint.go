package engine

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/fsutil"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/mod/sumdb/note"
)

// Checkpoints (SPEC §5) are signed notes of every anchor's (size, root),
// built and signed by the proof package and kept as files:
//
//	<dir>/checkpoints/<seq, 16 decimal digits>-<UTC time, 20060102T150405.000000000Z>.note
//
// Names sort in creation order (the seq grows by one each time, whatever
// the clock does). Each file is written whole — temporary file, fsync,
// rename, fsync of the directory — so a crash leaves the old set or the new.
// A new checkpoint must extend the latest stored one: every anchor it names
// is still there, none shrank, and each tree that grew has a consistency
// proof from the old root to the new; otherwise it is refused (STATE_002).
// Once the file is durable, a create_checkpoint line in the audit log
// records its name and the hash of its bytes: only a checkpoint the log
// records bounds a truncation (ckpttrust.go).

// CheckpointsDir is the directory under the database root that holds the
// checkpoints CreateCheckpoint made.
const CheckpointsDir = "checkpoints"

const checkpointExt = ".note"

// checkpointTimeLayout is the time in a stored checkpoint's file name.
const checkpointTimeLayout = "20060102T150405.000000000Z"

// StoredCheckpoint is one checkpoint file of the database.
type StoredCheckpoint struct {
	Name string // file name, e.g. 0000000000000001-20260131T120000.000000000Z.note
	Path string
	Note []byte // the signed note as stored
	// Checkpoint is the note's body, parsed; its signature is not checked
	// here (proof.OpenCheckpoint does that with a verifier key).
	Checkpoint *proof.Checkpoint
	// Err, when set, says why the file is not a well-formed checkpoint
	// (Checkpoint is then nil).
	Err error
}

// CreateCheckpoint signs a checkpoint of every anchor's current size and
// Merkle root with signerKey (a note signer key, as proof.GenerateKeys
// makes) and keeps it in the database. It returns the signed note and its
// parsed body.
//
// It signs only durable records: appends made with NoSync that it lists
// are made durable first (Sync), so a failed database signs nothing.
//
// Before storing it, it checks that the new checkpoint extends the latest
// stored one: a contradiction — an anchor missing or shrunk, a root that
// changed at the same size, a tree that is not an extension of the old one,
// a stored checkpoint of another database or one that cannot be read — is
// refused with STATE_002, and nothing is stored. If the latest checkpoint
// was signed with the same key, its signature must verify (AUTH_003
// otherwise). A malformed key is INPUT_001.
//
// The stored file is recorded in the audit log before the note is
// returned; when the line cannot be appended the file is removed again and
// the error returned (IO_001, or INT_002 for an audit log that holds lines
// the database did not write).
func (db *DB) CreateCheckpoint(ctx context.Context, signerKey string) ([]byte, *proof.Checkpoint, error) {
	if db.ro != nil {
		return nil, nil, db.ro.refuseWrite(db.dir)
	}
	if err := db.beginRead(ctx); err != nil {
		return nil, nil, err
	}
	defer db.endRead()
	signerKey = strings.TrimSpace(signerKey)
	verifierKey, err := verifierForSigner(signerKey)
	if err != nil {
		return nil, nil, err
	}
	if db.closed.Load() {
		return nil, nil, errClosed
	}
	db.checkpointMu.Lock()
	defer db.checkpointMu.Unlock()

	ids, err := db.anchorIDs()
	if err != nil {
		return nil, nil, err
	}
	entries := make([]proof.Entry, 0, len(ids))
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		a, err := db.loadedAnchor(id)
		if err != nil {
			return nil, nil, err
		}
		if a == nil {
			continue
		}
		v := a.view()
		if v.head.head == 0 {
			continue
		}
		entries = append(entries, proof.Entry{Anchor: id, Size: v.head.head, Root: v.root()})
	}
	// The views may hold NoSync appends, which a power loss can still take
	// away; a checkpoint kept (and published) over them would then list
	// records the database no longer has, and it could never sign another.
	// Every record a view holds has its block in the journal, the log
	// recovery restores from: one journal fdatasync makes them all durable
	// before anything is signed, and none at all when no NoSync append is
	// pending. (A settle, which writes out and fsyncs every segment, is
	// not needed for that.)
	// A database that stopped accepting writes signs nothing (the read
	// gate's wait for visibility does not see every failure in time).
	if err := db.writable(); err != nil {
		return nil, nil, err
	}
	if err := db.syncJournal(); err != nil {
		return nil, nil, err
	}
	// NB: after the views, so the snapshot holds every tree they name.
	snap := db.index.NewSnapshot()
	defer snap.Close()
	cp, err := proof.NewCheckpoint(db.id, db.opts.Clock(), entries)
	if err != nil {
		return nil, nil, err
	}
	msg, err := proof.Sign(cp.Marshal(), signerKey)
	if err != nil {
		return nil, nil, err
	}
	// Only the newest stored checkpoint matters here: the new one must
	// extend it and takes the next number (read alone, so the cost does
	// not grow with the checkpoints kept).
	latest, err := db.LatestCheckpoint(ctx)
	if err != nil {
		return nil, nil, err
	}
	if latest != nil {
		if err := checkExtends(ctx, latest, cp, verifierKey, consistencyProver(snap)); err != nil {
			return nil, nil, err
		}
	}
	name, err := db.storeCheckpoint(latest, cp, msg)
	if err != nil {
		return nil, nil, err
	}
	if err := db.auditCheckpoint(name, msg, verifierKey); err != nil {
		return nil, nil, err
	}
	return msg, cp, nil
}

// auditCheckpoint records the checkpoint just stored as name in the audit
// log: only a checkpoint the log records bounds a cut (ckpttrust.go), since
// compaction holds no key to check a signature with. One the log cannot
// record is removed again and the error returned, so that no note is
// handed out that the database does not count as its own; a crash between
// the two leaves one behind, which the next checkpoint supersedes.
func (db *DB) auditCheckpoint(name string, msg []byte, verifierKey string) error {
	db.compactMu.Lock() // the audit log has one writer at a time
	defer db.compactMu.Unlock()
	keyName, keyHash, _ := strings.Cut(verifierKey, "+")
	keyHash, _, _ = strings.Cut(keyHash, "+")
	err := db.appendAudit(snapshot.AuditEntry{Time: db.opts.Clock(), Action: snapshot.AuditCreateCheckpoint,
		Added: []snapshot.AuditItem{snapshot.CheckpointItem(name, msg)}, Note: "signed by key " + keyName + "+" + keyHash})
	if err == nil {
		return nil
	}
	dir := db.fs.PathJoin(db.dir, CheckpointsDir)
	path := db.fs.PathJoin(dir, name)
	if rerr := db.fs.Remove(path); rerr != nil {
		return errors.Join(err, errs.Wrap(errs.CodeWriteFailed, rerr, "remove %s, which the audit log does not record", path))
	}
	return errors.Join(err, syncDirOf(db.fs, dir))
}

// checkExtends refuses a new checkpoint that contradicts the latest stored
// one.
func checkExtends(ctx context.Context, prev *StoredCheckpoint, cp *proof.Checkpoint, verifierKey string, prove proof.ConsistencyProver) error {
	if _, err := proof.OpenCheckpoint(prev.Note, verifierKey); err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &invalid):
			// Signed with this key, and the signature does not verify.
			return errs.Wrap(errs.CodeSignatureInvalid, err, "the latest stored checkpoint %s", prev.Path)
		case errors.As(err, &unverified) && prev.Err == nil:
			// Signed with another key: only its body can be compared.
		default:
			return errs.Wrap(errs.CodeConflict, err, "the latest stored checkpoint %s cannot be read, so a new one cannot be shown to extend it", prev.Path)
		}
	}
	if prev.Err != nil {
		return errs.Wrap(errs.CodeConflict, prev.Err, "the latest stored checkpoint %s cannot be read, so a new one cannot be shown to extend it", prev.Path)
	}
	err := proof.CheckConsistent(ctx, prev.Checkpoint, cp, prove)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch errs.CodeOf(err) {
	case errs.CodeWriteFailed:
		return err
	case errs.CodeConflict:
		return errs.Wrap(errs.CodeConflict, err, "the new checkpoint contradicts the latest stored one (%s)", prev.Path)
	}
	return errs.Wrap(errs.CodeConflict, err, "the new checkpoint does not extend the latest stored one (%s)", prev.Path)
}

// syncJournal makes every block appended to the journal so far durable.
func (db *DB) syncJournal() error {
	w := db.flushJournal.Load()
	if w == nil {
		return nil
	}
	if err := w.Sync(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "journal fdatasync")
	}
	return nil
}

// storeCheckpoint writes the signed note as the next checkpoint file and
// returns its name.
func (db *DB) storeCheckpoint(latest *StoredCheckpoint, cp *proof.Checkpoint, msg []byte) (string, error) {
	fs := db.fs
	dir := fs.PathJoin(db.dir, CheckpointsDir)
	if err := mkdirAllSynced(fs, dir); err != nil {
		return "", errs.Wrap(errs.CodeWriteFailed, err, "create %s", dir)
	}
	seq := uint64(1)
	if latest != nil {
		seq = checkpointSeq(latest.Name) + 1
	}
	name := fmt.Sprintf("%016d-%s%s", seq, cp.Time.UTC().Format(checkpointTimeLayout), checkpointExt)
	return name, writeFileAtomic(fs, dir, name, msg)
}

// checkpointSeq is the sequence number that starts a checkpoint file name.
func checkpointSeq(name string) uint64 {
	head, _, _ := strings.Cut(name, "-")
	n, _ := strconv.ParseUint(head, 10, 64)
	return n
}

// writeFileAtomic writes data to dir/name through a temporary file, fsyncs
// it, renames it into place and fsyncs the directory.
func writeFileAtomic(fs vfs.FS, dir, name string, data []byte) error {
	path := fs.PathJoin(dir, name)
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "create %s", tmp)
	}
	_, err = f.Write(slices.Clone(data)) // NB: a vfs.File may modify what it is given
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return errs.Wrap(errs.CodeWriteFailed, err, "write %s", path)
	}
	return syncDirOf(fs, dir)
}

// Checkpoints returns the checkpoints stored in the database, oldest first.
// A file that is not a well-formed checkpoint is listed with Err set.
func (db *DB) Checkpoints(ctx context.Context) ([]StoredCheckpoint, error) {
	names, dirErr, err := db.checkpointNames()
	if dirErr != nil || err != nil {
		return dirErr, err
	}
	out := make([]StoredCheckpoint, 0, len(names))
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, err := db.readStoredCheckpoint(name)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// LatestCheckpoint returns the newest stored checkpoint, or nil when there
// is none. It reads that one file alone: CreateCheckpoint calls it, and a
// database that signs a checkpoint per append keeps thousands.
func (db *DB) LatestCheckpoint(ctx context.Context) (*StoredCheckpoint, error) {
	names, dirErr, err := db.checkpointNames()
	if err != nil {
		return nil, err
	}
	if dirErr != nil {
		return &dirErr[0], nil
	}
	if len(names) == 0 {
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := db.readStoredCheckpoint(names[len(names)-1])
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// checkpointNames lists the checkpoint files, oldest first (their names
// begin with their sequence number). A checkpoints directory that is not
// a directory comes back as dirErr, one entry that is not a checkpoint, so
// verify reports it.
func (db *DB) checkpointNames() (names []string, dirErr []StoredCheckpoint, err error) {
	fs := db.fs
	dir := fs.PathJoin(db.dir, CheckpointsDir)
	all, err := fsutil.List(fs, dir)
	var ee *fsutil.EntryError
	if errors.As(err, &ee) {
		// NB: not listed (the list of a FIFO blocks).
		return nil, []StoredCheckpoint{{Name: fs.PathBase(dir), Path: dir,
			Err: errs.New(errs.CodeInvalidInput, "the checkpoints directory is %s", ee.What)}}, nil
	}
	if err != nil {
		if oserrorIsNotExist(err) {
			return nil, nil, nil
		}
		return nil, nil, errs.Wrap(errs.CodeWriteFailed, err, "list %s", dir)
	}
	for _, name := range all {
		if strings.HasSuffix(name, checkpointExt) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil, nil
}

// readStoredCheckpoint reads and parses the checkpoint file name. A file
// that is not a well-formed checkpoint comes back with Err set; only a
// failure to read is an error.
func (db *DB) readStoredCheckpoint(name string) (StoredCheckpoint, error) {
	fs := db.fs
	s := StoredCheckpoint{Name: name, Path: fs.PathJoin(db.dir, CheckpointsDir, name)}
	// NB: looked at before it is opened: the open of a FIFO blocks with no
	// context, and a directory read fails as I/O (IO_001, so verify
	// stopped, exit 2). Like a file that is not a signed note, such an
	// entry is listed with Err: a finding.
	if _, err := fsutil.Regular(fs, s.Path, true); err != nil {
		var ee *fsutil.EntryError
		if !errors.As(err, &ee) {
			return s, errs.Wrap(errs.CodeWriteFailed, err, "stat %s", s.Path)
		}
		s.Err = errs.New(errs.CodeInvalidInput, "%s is %s", name, ee.What)
		return s, nil
	}
	var err error
	if s.Note, err = readWholeFile(fs, s.Path); err != nil {
		return s, errs.Wrap(errs.CodeWriteFailed, err, "read %s", s.Path)
	}
	s.Checkpoint, s.Err = ParseCheckpointNote(s.Note)
	return s, nil
}

// ParseCheckpointNote parses the body of a signed checkpoint note without
// checking its signature (use proof.OpenCheckpoint for that). A note that is
// not a body followed by a blank line and signature lines is AUTH_003; a
// malformed body INPUT_001 (a root that does not match its anchors INT_001).
func ParseCheckpointNote(msg []byte) (*proof.Checkpoint, error) {
	i := bytes.LastIndex(msg, []byte("\n\n"))
	if i < 0 || !bytes.HasSuffix(msg, []byte("\n")) {
		return nil, errs.New(errs.CodeSignatureInvalid, "not a signed note: no blank line before the signatures")
	}
	return proof.ParseCheckpointBody(msg[:i+1])
}

// readWholeFile reads the file at path, a name a listing gave. One that is
// not a regular file is an *fsutil.EntryError: never opened.
func readWholeFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fsutil.Open(fs, path, true)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// verifierForSigner returns the note verifier key of a note signer key
// ("PRIVATE+KEY+<name>+<hash>+<base64(0x01 ‖ ed25519 seed)>"), so that a
// checkpoint signed earlier with the same key can be checked. A key that is
// not an ed25519 note signer key is INPUT_001 (its text is never quoted).
func verifierForSigner(signerKey string) (string, error) {
	signer, err := note.NewSigner(signerKey)
	if err != nil {
		return "", errs.Wrap(errs.CodeInvalidInput, err, "malformed signer key")
	}
	// NB: the key is "PRIVATE+KEY+<name>+<hash>+<base64>", and base64 may
	// itself contain '+': cut the fields off the front.
	rest, _ := strings.CutPrefix(signerKey, "PRIVATE+KEY+")
	_, rest, _ = strings.Cut(rest, "+") // the name
	_, rest, _ = strings.Cut(rest, "+") // the hash
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(key) != 1+ed25519.SeedSize || key[0] != 1 {
		return "", errs.New(errs.CodeInvalidInput, "signer key is not an ed25519 note key")
	}
	pub := ed25519.NewKeyFromSeed(key[1:]).Public().(ed25519.PublicKey)
	vkey := fmt.Sprintf("%s+%08x+%s", signer.Name(), signer.KeyHash(), base64.StdEncoding.EncodeToString(append([]byte{1}, pub...)))
	if v, err := note.NewVerifier(vkey); err != nil || v.KeyHash() != signer.KeyHash() {
		return "", errs.New(errs.CodeInvalidInput, "signer key does not derive a verifier key")
	}
	return vkey, nil
}
