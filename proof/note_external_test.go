package proof_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"golang.org/x/mod/sumdb/note"
)

// writeSignedCheckpoint is the only part that uses anchordb: it produces the
// key pair and the signed note as files, as the CLI would.
func writeSignedCheckpoint(t *testing.T, dir string) (notePath, pubPath string) {
	t.Helper()
	skey, vkey, err := proof.GenerateKeys("example.org/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	entries := []proof.Entry{
		{Anchor: "dev 1", Size: 3, Root: segment.Hash{1}},
		{Anchor: `sensor "β"`, Size: 1, Root: segment.Hash{2}},
	}
	c, err := proof.NewCheckpoint("0f0e", time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), entries)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := proof.Sign(c.Marshal(), skey)
	if err != nil {
		t.Fatal(err)
	}
	notePath, pubPath = filepath.Join(dir, "checkpoint.note"), filepath.Join(dir, "anchordb.pub")
	if err := os.WriteFile(notePath, msg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, []byte(vkey+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return notePath, pubPath
}

// TestCheckpointVerifiesWithNoteAlone verifies a checkpoint with nothing but
// the public key file and golang.org/x/mod/sumdb/note (CONTRACT §5).
func TestCheckpointVerifiesWithNoteAlone(t *testing.T) {
	notePath, pubPath := writeSignedCheckpoint(t, t.TempDir())

	// From here on: only the files, the standard library and note.
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
	if lines[0] != "anchordb/0f0e/blake3" || lines[1] != "anchors 2" || lines[2] != "records 4" ||
		!strings.HasPrefix(lines[3], "root blake3:") || lines[4] != "time 2026-02-01T00:00:00Z" ||
		lines[5] != `anchor "dev 1" 3 blake3:01`+strings.Repeat("0", 62) ||
		lines[6] != `anchor "sensor \"β\"" 1 blake3:02`+strings.Repeat("0", 62) {
		t.Fatalf("body:\n%s", n.Text)
	}
	if !strings.Contains(string(msg), "\n\n— example.org/anchordb ") {
		t.Fatalf("signature line missing:\n%s", msg)
	}

	// A changed byte of the text fails under note alone.
	forged := []byte(strings.Replace(string(msg), "records 4", "records 5", 1))
	if _, err := note.Open(forged, note.VerifierList(v)); err == nil {
		t.Fatal("note.Open accepted a changed checkpoint")
	}
}
