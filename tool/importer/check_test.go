package importer

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// TestCheckNamesTheFirstBadLine: pass 1 of a stream refuses the input at
// its first bad line, with INPUT_001, nothing imported and no spool file
// left behind; a good stream is read again by pass 2 from its spool.
func TestCheckNamesTheFirstBadLine(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx := context.Background()
	bad := `{"anchor":"a","key":"k","value":"v"}` + "\n\n" + `{"anchor":"a","key":"k","value":"v","colour":"red"}` + "\n" + `{"anchor":"a"`
	_, err := Check(ctx, strings.NewReader(bad), nil, segment.DefaultLimits())
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || le.Imported != 0 || errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("Check of a bad third line: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "line 3: ") || !strings.HasSuffix(err.Error(), "(before it: 0 records imported, 0 duplicates)") {
		t.Fatalf("the error says %q", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("a refused check left %v in the temp directory", left)
	}

	good := `{"anchor":"a","key":"k","value":"v","idempotency_key":"op-1"}` + "\n\n" +
		`{"anchor_id":"b","local_counter":5,"event_type":"temp","payload":{"c":21.5}}` + "\n" +
		`{"anchor":"a","key":"k","value":"v","idempotency_key":"op-1"}`
	input, err := Check(ctx, strings.NewReader(good), nil, segment.DefaultLimits())
	if err != nil || input.Lines != 3 {
		t.Fatalf("Check of three good lines: %v, %v", input, err)
	}
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := input.CheckRetries(ctx, db); err != nil {
		t.Fatal(err)
	}
	var seen []Summary
	im := &Importer{DB: db, Batch: 1, Progress: func(s Summary) { seen = append(seen, s) }}
	sum, err := im.Import(ctx, input)
	if err != nil || sum != (Summary{Imported: 2, Duplicates: 1, Lines: 3}) {
		t.Fatalf("Import: %+v, %v", sum, err)
	}
	if len(seen) != 3 || seen[2] != sum {
		t.Fatalf("progress after each batch: %+v", seen)
	}
	input.Close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("Close left %v in the temp directory", left)
	}
}

// TestCheckRetriesRefusesAnOverLimitCounterThatRetriesNothing: a counter
// above engine.MaxCallerCounter may only come with an idempotency key that
// retries an append; one that retries nothing refuses the import at its
// line before anything is appended.
func TestCheckRetriesRefusesAnOverLimitCounterThatRetriesNothing(t *testing.T) {
	ctx := context.Background()
	over := uint64(engine.MaxCallerCounter) + 1
	lines := `{"anchor":"a","key":"k","value":"v"}` + "\n" +
		`{"anchor":"a","key":"k","value":"v","idempotency_key":"op-9","counter":` + strconv.FormatUint(over, 10) + `}`
	input, err := Check(ctx, strings.NewReader(lines), nil, segment.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer input.Close()
	db, err := engine.Open(t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = input.CheckRetries(ctx, db)
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2 || errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("CheckRetries: %v", err)
	}
	if info, ok, err := db.AnchorInfo(ctx, "a"); err != nil || ok {
		t.Fatalf("anchor a after the refusal: %+v %v %v", info, ok, err)
	}
}
