package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/proof"
)

// writeEngineCheckpoint is the only part of the external checkpoint test that
// uses anchordb: it makes a database, a key pair and a checkpoint the way a
// user would, and returns the stored checkpoint file, the public key file
// and the database id.
func writeEngineCheckpoint(t *testing.T) (notePath, pubPath, dbID string) {
	t.Helper()
	dir := t.TempDir()
	db, err := engine.Open(filepath.Join(dir, "db"), engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, err := db.Put(ctx, fmt.Sprintf("sensor %d", i%3), []byte("k"), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	skey, vkey, err := proof.GenerateKeys("example.org/anchordb")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CreateCheckpoint(ctx, skey); err != nil {
		t.Fatal(err)
	}
	latest, err := db.LatestCheckpoint(ctx)
	if err != nil || latest == nil {
		t.Fatalf("latest checkpoint: %v", err)
	}
	pubPath = filepath.Join(dir, "anchordb.pub")
	if err := os.WriteFile(pubPath, []byte(vkey+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return latest.Path, pubPath, db.ID()
}
