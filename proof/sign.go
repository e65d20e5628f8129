package proof

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"golang.org/x/mod/sumdb/note"
)

// GenerateKeys returns a new ed25519 key pair for signed notes named name,
// from crypto/rand: signerKey is "PRIVATE+KEY+<name>+<hash>+<base64>" (keep
// it secret; the CLI writes it to PREFIX.key with mode 0600) and verifierKey
// is "<name>+<hash>+<base64>" (public; PREFIX.pub). Notes signed with it end
// in the line "— <name> <base64 signature>". name must be non-empty UTF-8
// without spaces, control characters or '+' (INPUT_001).
func GenerateKeys(name string) (signerKey, verifierKey string, err error) {
	if err := validateKeyName(name); err != nil {
		return "", "", err
	}
	signerKey, verifierKey, err = note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", "", fmt.Errorf("generate key %q: %w", name, err)
	}
	return signerKey, verifierKey, nil
}

// validateKeyName applies the note package's rule for key names, and
// refuses ASCII control characters as well.
//
// NB: note.GenerateKey and note.Sign accept a name with one (only spaces and
// '+' are excluded), but note.Open refuses any note holding a control
// character other than newline, and the name is in the signature line: a
// checkpoint signed under such a name could never be opened, and once
// stored it would fail every verify and block every later checkpoint.
func validateKeyName(name string) error {
	if name == "" || !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsSpace) >= 0 || strings.Contains(name, "+") ||
		strings.IndexFunc(name, func(r rune) bool { return r < 0x20 }) >= 0 {
		return errs.New(errs.CodeInvalidInput, "key name %q must be non-empty UTF-8 without spaces, control characters or '+'", name)
	}
	return nil
}

// Sign signs a checkpoint body (Checkpoint.Marshal) with signerKey and
// returns the signed note: the body, a blank line, and the signature line
// "— <name> <base64(key hash ‖ ed25519 signature)>\n" (C2SP signed-note).
// Surrounding white space of signerKey (a trailing newline from a key file)
// is ignored. The body is parsed first: a malformed or non-canonical body is
// INPUT_001 (a wrong root INT_001) and is never signed; a malformed signer
// key is INPUT_001 (its text is never quoted in the error).
func Sign(body []byte, signerKey string) ([]byte, error) {
	if _, err := ParseCheckpointBody(body); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	signer, err := note.NewSigner(strings.TrimSpace(signerKey))
	if err != nil {
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "sign: malformed signer key")
	}
	// A key made elsewhere may carry a name no note can be opened with.
	if err := validateKeyName(signer.Name()); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	msg, err := note.Sign(&note.Note{Text: string(body)}, signer)
	if err != nil {
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "sign checkpoint as %q", signer.Name())
	}
	return msg, nil
}

// OpenCheckpoint verifies a signed checkpoint note against the verifier keys
// and parses its body. At least one signature must be by one of the keys and
// every signature by a known key must verify; signatures by other keys are
// ignored. Surrounding white space of each key is ignored.
//
// Errors: no keys or a malformed key is INPUT_001; bytes that are not a
// signed note at all (empty, truncated, no signature block, a malformed
// signature line) are INPUT_001; a well-formed note that does not verify —
// altered text, a forged or truncated signature, no signature by a known
// key, a signature line by a given key that is repeated or not in canonical
// base64 (see checkSignatureLines) — is AUTH_003 (signature_invalid). Both
// wrap the note package's error. A body that verifies but is malformed is INPUT_001 (a root that
// does not match its anchors INT_001).
func OpenCheckpoint(noteBytes []byte, verifierKeys ...string) (*Checkpoint, error) {
	if len(verifierKeys) == 0 {
		return nil, errs.New(errs.CodeInvalidInput, "open checkpoint: no verifier key")
	}
	vs, err := parseVerifierKeys(verifierKeys)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	n, err := note.Open(noteBytes, note.VerifierList(vs...))
	if err != nil {
		return nil, errs.Wrap(openErrorCode(err), err, "checkpoint %s", describeOpenError(err))
	}
	if err := checkSignatureLines(noteBytes, vs); err != nil {
		return nil, err
	}
	c, err := ParseCheckpointBody([]byte(n.Text))
	if err != nil {
		return nil, fmt.Errorf("signed checkpoint: %w", err)
	}
	return c, nil
}

// checkSignatureLines holds the signature lines of a note that note.Open
// accepted to one spelling, as ParseCheckpointBody holds the body: each
// line by one of the given keys must be the only one by that key, with its
// signature in canonical base64 (AUTH_003 otherwise, its cause a
// *note.InvalidSignatureError naming the key).
//
// NB: note.Open decodes a signature with the lenient base64.StdEncoding,
// which ignores the unused low bits of the last character, and it verifies
// only the first line of each key, skipping the others. Without this check
// either change to the file passes: a stored checkpoint altered on disk,
// unnoticed. Lines by other keys (cosigners) are not checked, as the
// signed-note format has it.
func checkSignatureLines(msg []byte, vs []note.Verifier) error {
	sigs := msg[bytes.LastIndex(msg, []byte("\n\n"))+2:] // note.Open found it
	seen := map[string]bool{}
	for _, line := range strings.SplitAfter(string(sigs), "\n") {
		if line == "" {
			continue
		}
		line = strings.TrimSuffix(strings.TrimPrefix(line, "— "), "\n")
		name, b64, _ := strings.Cut(line, " ")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) < 5 {
			continue // note.Open refuses these; nothing to add
		}
		hash := binary.BigEndian.Uint32(sig)
		if !slices.ContainsFunc(vs, func(v note.Verifier) bool { return v.Name() == name && v.KeyHash() == hash }) {
			continue
		}
		id := fmt.Sprintf("%s+%08x", name, hash)
		cause := &note.InvalidSignatureError{Name: name, Hash: hash}
		if seen[id] {
			return errs.Wrap(errs.CodeSignatureInvalid, cause, "checkpoint has more than one signature line by %s (signature block altered)", id)
		}
		seen[id] = true
		if base64.StdEncoding.EncodeToString(sig) != b64 {
			return errs.Wrap(errs.CodeSignatureInvalid, cause, "checkpoint signature by %s is not in canonical base64 (signature line altered)", id)
		}
	}
	return nil
}

// CheckVerifierKeys reports, as INPUT_001, the first of keys that is not a
// verifier key (the text of a keygen .pub file, surrounding white space
// ignored). A caller that takes keys for later use checks them up front, so
// a malformed key is bad input rather than every signature failing.
func CheckVerifierKeys(keys ...string) error {
	_, err := parseVerifierKeys(keys)
	return err
}

func parseVerifierKeys(keys []string) ([]note.Verifier, error) {
	vs := make([]note.Verifier, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		v, err := note.NewVerifier(strings.TrimSpace(k))
		if err != nil {
			return nil, errs.Wrap(errs.CodeInvalidInput, err, "verifier key %d", i+1)
		}
		// NB: note.Open refuses a list that names one key twice as
		// ambiguous; the same key given twice is harmless, so drop repeats.
		id := fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())
		if !seen[id] {
			seen[id] = true
			vs = append(vs, v)
		}
	}
	return vs, nil
}

// openErrorCode classifies an error of note.Open: a well-formed note whose
// signatures do not verify with the given keys is AUTH_003; anything else
// (empty, truncated, no signature block, a malformed signature line, control
// characters) is not a signed note at all, and a malformed file is
// INPUT_001 (CONTRACT §8).
func openErrorCode(err error) errs.Code {
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	if errors.As(err, &unverified) || errors.As(err, &invalid) {
		return errs.CodeSignatureInvalid
	}
	return errs.CodeInvalidInput
}

// describeOpenError names what note.Open found wrong.
func describeOpenError(err error) string {
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		names := make([]string, 0, len(unverified.Note.UnverifiedSigs))
		for _, s := range unverified.Note.UnverifiedSigs {
			names = append(names, fmt.Sprintf("%s+%08x", s.Name, s.Hash))
		}
		return fmt.Sprintf("has no signature by a given key (signed by: %s)", strings.Join(names, ", "))
	case errors.As(err, &invalid):
		return fmt.Sprintf("signature by %s+%08x does not verify (text or signature altered)", invalid.Name, invalid.Hash)
	}
	return "is not a well-formed signed note"
}
