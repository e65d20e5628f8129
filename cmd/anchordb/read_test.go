package main

import (
	"encoding/json"
	"testing"
)

// log --to takes any uint64; the largest means through the last record, as
// 0 does: the engine's scan bound must not wrap past it and print nothing.
func TestLogToMaxUint64(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"1", "2", "3"} {
		mustRun(t, "--dir", dir, "put", "--no-sync", "a", "k", v)
	}
	got := lines(t, mustRun(t, "--dir", dir, "--json", "log", "a", "--from", "2", "--to", "18446744073709551615").stdout)
	if len(got) != 2 || got[0]["seq"].(json.Number).String() != "2" || got[1]["seq"].(json.Number).String() != "3" {
		t.Fatalf("log a --from 2 --to MaxUint64: %v, want seqs 2 and 3", got)
	}
}
