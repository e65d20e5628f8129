package engine_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// TestCheckpointOpensWithNoteAlone: a checkpoint the engine stored verifies
// with golang.org/x/mod/sumdb/note and the public key file alone — this file
// imports nothing of anchordb — and stops verifying when a byte changes.
func TestCheckpointOpensWithNoteAlone(t *testing.T) {
	notePath, pubPath, dbID := writeEngineCheckpoint(t)
	msg, err := os.ReadFile(notePath)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(pub)))
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		t.Fatalf("note.Open: %v", err)
	}
	if len(n.Sigs) != 1 || n.Sigs[0].Name != "example.org/anchordb" {
		t.Fatalf("signatures %+v", n.Sigs)
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if lines[0] != "anchordb/"+dbID+"/blake3" || lines[1] != "anchors 3" || lines[2] != "records 50" ||
		!strings.HasPrefix(lines[3], "root blake3:") || !strings.HasPrefix(lines[4], "time ") || len(lines) != 8 {
		t.Fatalf("checkpoint body:\n%s", n.Text)
	}
	for i, want := range []string{`anchor "sensor 0" 17 blake3:`, `anchor "sensor 1" 17 blake3:`, `anchor "sensor 2" 16 blake3:`} {
		if !strings.HasPrefix(lines[5+i], want) {
			t.Fatalf("line %d is %q, want %q…", 6+i, lines[5+i], want)
		}
	}
	// Every byte of the text and of the signature line's name, and every
	// byte of the decoded signature. (Not every base64 character: the last
	// one of the signature carries two padding bits that base64 ignores.)
	sigLine := bytes.LastIndex(msg[:len(msg)-1], []byte("\n")) + 1
	nameEnd := sigLine + bytes.LastIndexByte(msg[sigLine:], ' ') + 1
	for i := 0; i < nameEnd; i++ {
		bad := bytes.Clone(msg)
		bad[i] ^= 0x01
		if _, err := note.Open(bad, note.VerifierList(v)); err == nil {
			t.Fatalf("note verifies with byte %d changed", i)
		}
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(msg[nameEnd:])))
	if err != nil {
		t.Fatal(err)
	}
	for i := range sig {
		bad := bytes.Clone(sig)
		bad[i] ^= 0x80
		forged := append(bytes.Clone(msg[:nameEnd]), base64.StdEncoding.EncodeToString(bad)+"\n"...)
		if _, err := note.Open(forged, note.VerifierList(v)); err == nil {
			t.Fatalf("note verifies with signature byte %d changed", i)
		}
	}
}
