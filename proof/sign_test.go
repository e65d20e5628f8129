package proof

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"golang.org/x/mod/sumdb/note"
)

// A signed checkpoint has one spelling (ParseCheckpointBody refuses any
// other of the body), and so one signature line per key. note.Open decodes
// the signature leniently — the unused low bits of its last base64
// character are ignored — and verifies only the first of several lines by
// one key, so without OpenCheckpoint's own check a changed byte of the
// signature line, or a line of garbage added under the signer's name and
// key hash, would go unnoticed.
func TestOpenCheckpointRefusesAlteredSignatureLines(t *testing.T) {
	c, _ := sampleCheckpoint(t)
	skey, vkey, err := GenerateKeys("anchordb-test")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := Sign(c.Marshal(), skey)
	if err != nil {
		t.Fatal(err)
	}
	split := bytes.LastIndex(msg, []byte("\n\n")) + 2
	sigLine := string(msg[split:])
	prefix, b64, _ := strings.Cut(strings.TrimSuffix(sigLine, "\n"), "anchordb-test ")
	b64 = strings.TrimSuffix(b64, "\n")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}

	// 68 bytes (key hash and signature) in base64 end in one '=': the
	// character before it carries 4 bits of data and 2 unused ones.
	last := strings.TrimRight(b64, "=")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.IndexByte(alphabet, last[len(last)-1])
	lenient := last[:len(last)-1] + string(alphabet[i^1]) + b64[len(last):]
	if got, err := base64.StdEncoding.DecodeString(lenient); err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("the altered encoding %q does not decode to the same signature: %v", lenient, err)
	}
	garbage := append([]byte(nil), raw...)
	garbage[10] ^= 0xff
	extra := prefix + "anchordb-test " + base64.StdEncoding.EncodeToString(garbage) + "\n"

	cases := []struct {
		name string
		msg  []byte
	}{
		{"unused bits of the last base64 character", []byte(string(msg[:split]) + prefix + "anchordb-test " + lenient + "\n")},
		{"a second, bad signature line by the same key", append(bytes.Clone(msg), extra...)},
		{"a bad signature line by the same key before the good one", []byte(string(msg[:split]) + extra + sigLine)},
		{"the signature line twice", append(bytes.Clone(msg), sigLine...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// note.Open alone accepts each of these.
			v, _ := note.NewVerifier(vkey)
			if _, err := note.Open(tc.msg, note.VerifierList(v)); err != nil && tc.name != "a bad signature line by the same key before the good one" {
				t.Fatalf("note.Open: %v (the case no longer shows what it is for)", err)
			}
			_, err := OpenCheckpoint(tc.msg, vkey)
			testutil.WantCode(t, err, errs.CodeSignatureInvalid)
			var invalid *note.InvalidSignatureError
			if !errors.As(err, &invalid) || invalid.Name != "anchordb-test" {
				t.Errorf("AUTH_003 without a note.InvalidSignatureError naming the key as its cause: %v", err)
			}
		})
	}

	// A signature by a key the caller did not give (a cosigner's) is not
	// checked, as the C2SP signed-note format has it.
	_, vkey2, _ := GenerateKeys("other")
	cosigned := append(bytes.Clone(msg), []byte("— other "+base64.StdEncoding.EncodeToString(garbage)+"\n")...)
	if _, err := OpenCheckpoint(cosigned, vkey); err != nil {
		t.Errorf("a line by another key: %v", err)
	}
	if _, err := OpenCheckpoint(msg, vkey, vkey2); err != nil {
		t.Errorf("the untouched note: %v", err)
	}
}
