package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIngestErrorSaysWhatWasAppended: an ingest that stops keeps what it
// joined, and its error says how much, as an import's does (stop 18's
// review: the CLI dropped the engine's report).
func TestIngestErrorSaysWhatWasAppended(t *testing.T) {
	err := fmt.Errorf("ingest anchor %q: %w", "m4", context.Canceled)
	b, jerr := json.Marshal(errorJSON(&ingestError{appended: 7, err: err}))
	if jerr != nil {
		t.Fatal(jerr)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["error"]["appended"] != float64(7) || !strings.Contains(m["error"]["message"].(string), "7 records appended") {
		t.Fatalf("error JSON %s: want appended 7, and the message to say so", b)
	}
}

// TestIngestFromANonDatabaseCreatesNothing: a --from that is no database is
// INPUT_001, and --dir is not created on the way.
func TestIngestFromANonDatabaseCreatesNothing(t *testing.T) {
	tmp := t.TempDir()
	dst := filepath.Join(tmp, "dst")
	r := runCLI(t, "--dir", dst, "--json", "ingest", "--from", tmp)
	wantCode(t, r, 2)
	errObj(t, r, "INPUT_001")
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("the refused ingest created %s (%v)", dst, err)
	}
}
