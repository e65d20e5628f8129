package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// overLimit is a counter above engine.MaxCallerCounter: a line may carry it
// only to retry an append made with it (one the database already holds).
var overLimit = uint64(engine.MaxCallerCounter) + 10

// TestImportOverLimitCounterIsAllOrNothing: a line whose counter is above
// the caller limit, with an idempotency key that is not a retry (neither in
// the database nor on an earlier line of the input), is over a limit: the
// import is refused whole with INPUT_001 naming that line, and nothing of the
// lines before it is appended (CONTRACT §9). Pass 1 decides it: letting the
// line through (it might have been a retry) would leave the engine to
// refuse it in pass 2, after the batches before it were written.
func TestImportOverLimitCounterIsAllOrNothing(t *testing.T) {
	var in []string
	for i := 1; i <= 7; i++ {
		in = append(in, fmt.Sprintf(`{"anchor":"w","key":"k%d","value":"%d"}`, i, i))
	}
	bad := fmt.Sprintf(`{"anchor":"w","key":"x","value":"v","idempotency_key":"new-op","counter":%d}`, overLimit)
	// The same key on an earlier line of another anchor is no retry.
	other := `{"anchor":"elsewhere","key":"x","value":"v","idempotency_key":"new-op"}`
	lines := append(append(append([]string{other}, in[:5]...), bad), in[5:]...)
	file := writeLines(t, lines...)

	check := func(t *testing.T, r result) {
		t.Helper()
		wantExit(t, r, 2)
		e := errObj(t, r, "INPUT_001")
		if num(t, e, "line") != 7 || num(t, e, "imported") != 0 {
			t.Fatalf("error %v: want line 7, nothing imported", e)
		}
		if !strings.Contains(str(t, e, "message"), fmt.Sprint(uint64(engine.MaxCallerCounter))) {
			t.Fatalf("the message does not name the limit: %v", e)
		}
	}

	dir := t.TempDir()
	mustRun(t, "--dir", dir, "put", "w", "seed", "1")
	logBefore := mustRun(t, "--dir", dir, "--json", "log", "w").stdout
	check(t, runCLI(t, "--dir", dir, "--json", "import", "--batch", "2", file))
	if got := mustRun(t, "--dir", dir, "--json", "log", "w").stdout; got != logBefore {
		t.Fatalf("a refused import appended to w:\n%s", got)
	}
	if r := runCLI(t, "--dir", dir, "--json", "log", "elsewhere"); r.code != 1 || !strings.Contains(r.stdout, "STATE_003") {
		t.Fatalf("a refused import appended to elsewhere (its log should be STATE_003, an unknown anchor): %v", r)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	check(t, cli(t, data, []string{"--dir", dir, "--json", "import", "--batch", "2", "-"}))
	if got := mustRun(t, "--dir", dir, "--json", "log", "w").stdout; got != logBefore {
		t.Fatalf("a refused import from stdin appended to w:\n%s", got)
	}

	// Into a --dir with no database: none is left behind.
	fresh := filepath.Join(t.TempDir(), "fresh")
	check(t, runCLI(t, "--dir", fresh, "--json", "import", "--batch", "2", file))
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Fatalf("the refused import left %s behind (%v)", fresh, err)
	}

	// A retry of an earlier line of the same input is a duplicate, whatever
	// its counter (CONTRACT §7): the import goes through.
	retry := fmt.Sprintf(`{"anchor":"w","key":"x","value":"v","idempotency_key":"op-x","counter":%d}`, overLimit)
	first := `{"anchor":"w","key":"x","value":"v","idempotency_key":"op-x","counter":500}`
	r := mustRun(t, "--dir", t.TempDir(), "--json", "import", "--batch", "2",
		writeLines(t, append(append(append([]string{first}, in[:5]...), retry), in[5:]...)...))
	if m := obj(t, r.stdout); num(t, m, "imported") != 8 || num(t, m, "duplicates") != 1 {
		t.Fatalf("summary %v, want 8 imported and 1 duplicate", m)
	}
}

// TestImportRetriesAnOverLimitAppend: a database holding a record whose
// counter is above the caller limit (appended before the limit; here it
// arrives by ingest) takes its retry from an import, as a duplicate, and
// still refuses a new append with such a counter before appending anything.
func TestImportRetriesAnOverLimitAppend(t *testing.T) {
	tmp := t.TempDir()
	src, dst := filepath.Join(tmp, "src"), filepath.Join(tmp, "dst")
	mustRun(t, "--dir", src, "put", "x", "k", "v")
	// Anchor "old" of src: one record with counter overLimit, written as
	// an engine from before the limit would have.
	rec := segment.Record{Anchor: "old", Seq: 1, Counter: overLimit, Time: 1, Type: segment.TypePut,
		Key: []byte("k"), Value: []byte("v"), IdempotencyKey: []byte("op-old"), PrevHash: segment.GenesisHash("old")}
	rec.Hash = rec.ComputeHash()
	h := segment.Header{Anchor: "old", Segno: 1, FirstSeq: 1, PrevHash: rec.PrevHash}
	seg := segment.AppendFrame(segment.AppendHeader(nil, &h), &rec)
	adir := segment.AnchorDir(vfs.Default, src, "old")
	if err := os.MkdirAll(adir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(adir, segment.FileName(1)), seg, 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "--dir", dst, "put", "w", "seed", "1")
	mustRun(t, "--dir", dst, "ingest", "--from", src, "--anchor", "old")

	good := `{"anchor":"w","key":"k1","value":"1"}`
	retryOld := fmt.Sprintf(`{"anchor":"old","key":"k","value":"v","idempotency_key":"op-old","counter":%d}`, overLimit)
	newOld := fmt.Sprintf(`{"anchor":"old","key":"k","value":"v","idempotency_key":"op-new","counter":%d}`, overLimit+1)
	r := runCLI(t, "--dir", dst, "--json", "import", "--batch", "1", writeLines(t, good, retryOld, good, newOld))
	wantExit(t, r, 2)
	if e := errObj(t, r, "INPUT_001"); num(t, e, "line") != 4 || num(t, e, "imported") != 0 {
		t.Fatalf("error %v: want line 4, nothing imported", e)
	}
	if l := lines(t, mustRun(t, "--dir", dst, "--json", "log", "w").stdout); len(l) != 1 {
		t.Fatalf("a refused import appended to w: %v", l)
	}
	r = mustRun(t, "--dir", dst, "--json", "import", "--batch", "1", writeLines(t, good, retryOld, good))
	if m := obj(t, r.stdout); num(t, m, "imported") != 2 || num(t, m, "duplicates") != 1 {
		t.Fatalf("summary %v, want 2 imported and 1 duplicate", m)
	}
}
