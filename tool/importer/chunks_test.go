package importer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// TestImportFileChangedBetweenPasses changes a regular import file after
// pass 1 checked it and before pass 2 appends it. Pass 2 must append only
// lines made of bytes pass 1 checked and stop with INPUT_001 where the file
// differs; an unchanged file imports whole across many chunks.
func TestImportFileChangedBetweenPasses(t *testing.T) {
	defer func(n int) { chunkSize = n }(chunkSize)
	chunkSize = 64

	var orig bytes.Buffer
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&orig, `{"anchor":"a","type":"put","key":"k%02d","value":"v%02d"}`+"\n", i, i)
	}
	// The lines wholly inside the first chunk are the only ones pass 2 may
	// append when a later chunk differs.
	inFirst := bytes.Count(orig.Bytes()[:chunkSize], []byte("\n"))
	// A shorter file fails at its last chunk: the lines before that chunk
	// are appended.
	lastChunk := (orig.Len() - 1) / chunkSize * chunkSize
	beforeLast := bytes.Count(orig.Bytes()[:lastChunk], []byte("\n"))

	cases := []struct {
		name   string
		change func(b []byte) []byte
		want   int // records imported
		fails  bool
	}{
		{"unchanged", func(b []byte) []byte { return b }, 20, false},
		{"same length, one byte in the second chunk", func(b []byte) []byte {
			b = bytes.Clone(b)
			// A value's digit: the line still parses, so without the
			// check it would be appended as it is now, not as checked.
			mark := []byte(`"value":"v`)
			i := bytes.Index(b[chunkSize:], mark) + chunkSize + len(mark)
			b[i] = 'x'
			return b
		}, inFirst, true},
		{"shorter", func(b []byte) []byte { return b[:len(b)-10] }, beforeLast, true},
		{"longer", func(b []byte) []byte {
			return append(bytes.Clone(b), `{"anchor":"a","type":"put","key":"late","value":"x"}`+"\n"...)
		}, 20, true},
		{"emptied", func(b []byte) []byte { return nil }, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "in.jsonl")
			if err := os.WriteFile(path, orig.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			input, err := Check(ctx, f, f, segment.DefaultLimits())
			if err != nil || input.Lines != 20 {
				t.Fatalf("pass 1: %v, %v", input, err)
			}
			defer input.Close()
			if err := os.WriteFile(path, tc.change(orig.Bytes()), 0o644); err != nil {
				t.Fatal(err)
			}
			db, err := engine.Open(filepath.Join(dir, "db"), engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			im := &Importer{DB: db, Batch: 3}
			sum, err := im.Import(ctx, input)
			if tc.fails {
				var le *LineError
				if !errors.Is(err, ErrChanged) || errs.CodeOf(err) != errs.CodeInvalidInput || !errors.As(err, &le) || le.Imported != tc.want {
					t.Fatalf("pass 2: want INPUT_001 for a changed file after %d records, got %v", tc.want, err)
				}
			} else if err != nil {
				t.Fatalf("pass 2: %v", err)
			}
			if sum.Imported != tc.want {
				t.Fatalf("imported %d records, want %d", sum.Imported, tc.want)
			}
			// What is in the database is exactly the first want lines as
			// pass 1 saw them.
			var got int
			for rec, err := range db.Log(ctx, "a", 1, 0) {
				if tc.want == 0 && errs.CodeOf(err) == errs.CodeDependencyMissing {
					break // nothing imported: anchor a is none the database holds
				}
				if err != nil {
					t.Fatal(err)
				}
				if wk, wv := fmt.Sprintf("k%02d", got), fmt.Sprintf("v%02d", got); string(rec.Key) != wk || string(rec.Value) != wv {
					t.Fatalf("record %d is %s=%s, want %s=%s", rec.Seq, rec.Key, rec.Value, wk, wv)
				}
				got++
			}
			if got != tc.want {
				t.Fatalf("the log holds %d records, want %d", got, tc.want)
			}
		})
	}
}
