package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// tagJournal is not an index table: the corpus of schema's FuzzIndexRows
// holds a journal block's payload under this tag.
const tagJournal = 'j'

// TestDamagedRowsAreIndexMismatch: the row decoders of schema return plain
// errors; the engine's readers of a seq row and of the mhistory_from row
// make a row that does not decode INT_004, with the decoder's words.
func TestDamagedRowsAreIndexMismatch(t *testing.T) {
	prefix := schema.AnchorPrefix(schema.TagSeq, "a")
	good := (&schema.Location{Segno: 1, Offset: 40, Size: 90, Counter: 9}).Append(nil)
	hist := schema.EncodeHistoryFrom(map[string]uint64{"a": 3, "b": 1})
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"seq row of a short key", func() error {
			_, _, err := decodeSeqRow(prefix, schema.SeqKey("a", 3)[:len(prefix)+7], good)
			return err
		}, "malformed seq key"},
		{"seq row of a short value", func() error {
			_, _, err := decodeSeqRow(prefix, schema.SeqKey("a", 3), good[:59])
			return err
		}, "seq entry of 59 bytes, want 60"},
		{"history_from cut short", func() error {
			_, err := loadHistoryFrom(rowReader(t, schema.MetaKey(schema.MetaHistoryFrom), hist[:len(hist)-1]))
			return err
		}, "malformed history_from row"},
		{"history_from out of order", func() error {
			row := append(append([]byte{1, 'b'}, make([]byte, 8)...), append([]byte{1, 'a'}, make([]byte, 8)...)...)
			_, err := loadHistoryFrom(rowReader(t, schema.MetaKey(schema.MetaHistoryFrom), row))
			return err
		}, `history_from row lists anchor "a" after "b"`},
	} {
		err := c.err()
		if e := testutil.WantCode(t, err, errs.CodeIndexMismatch); !strings.Contains(e.Error(), c.want) {
			t.Errorf("%s: %v; want it to say %q", c.name, err, c.want)
		}
	}
	if r, ok, err := decodeSeqRow(prefix, schema.SeqKey("a", 3), good); err != nil || !ok || r.seq != 3 || r.Segno != 1 {
		t.Fatalf("a good seq row: %+v, %v, %v", r, ok, err)
	}
	if m, err := loadHistoryFrom(rowReader(t, schema.MetaKey(schema.MetaHistoryFrom), hist)); err != nil || m["a"] != 3 || m["b"] != 1 {
		t.Fatalf("a good history_from row: %v, %v", m, err)
	}
}

// rowReader is a Pebble store in memory holding the one row k, v.
func rowReader(t *testing.T, k, v []byte) pebble.Reader {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Set(k, v, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	return db
}

// rowPrefix returns tag ‖ anchor ‖ 0x00, the prefix an anchor-scoped row key
// starts with, as the engine's scans of one anchor's rows see it.
func rowPrefix(key []byte) ([]byte, bool) {
	i := bytes.IndexByte(key, 0)
	if i < 2 {
		return nil, false
	}
	return key[:i+1], true
}

// TestWriteFuzzCorpora writes the real-* files of FuzzIndexRows' (in
// engine/internal/schema) committed
// corpus from a database that was compacted and truncated — a few rows of
// every table, the meta rows FuzzIndexRows decodes, journal block payloads —
// and of FuzzAuditLog's (in snapshot) from its audit log. It runs only when
// ANCHORDB_WRITE_FUZZ_CORPUS is set:
//
//	ANCHORDB_WRITE_FUZZ_CORPUS=1 go test ./engine -run '^TestWriteFuzzCorpora$'
func TestWriteFuzzCorpora(t *testing.T) {
	if os.Getenv("ANCHORDB_WRITE_FUZZ_CORPUS") == "" {
		t.Skip("set ANCHORDB_WRITE_FUZZ_CORPUS to write the real-* fuzz corpus files")
	}
	ctx := context.Background()
	fs := vfs.NewMem()
	db := mustOpen(t, fs, Options{FS: fs, SegmentSize: 4096, NoSync: true})
	defer db.Close()
	var journalRows [][2][]byte
	for i := 0; i < 300; i++ {
		a := fmt.Sprintf("a%d", i%2)
		var err error
		switch {
		case i%50 == 7:
			_, err = db.Delete(ctx, a, []byte(fmt.Sprintf("k%d", i%20)))
		case i%50 == 9:
			_, err = db.Append(ctx, Entry{Anchor: a, Type: "put", Key: []byte("k\x00nul"), Value: bytes.Repeat([]byte("big"), 400), IdempotencyKey: []byte(fmt.Sprintf("req-%d", i))})
		default:
			_, err = db.Put(ctx, a, []byte(fmt.Sprintf("k%d", i%20)), []byte(fmt.Sprintf("v%d", i)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	gens, err := journal.List(fs, db.journalDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, gen := range gens {
		if _, err := journal.ReadFile(fs, db.journalDir(), gen, 0, func(b journal.Block) error {
			if len(journalRows) < 3 {
				journalRows = append(journalRows, [2][]byte{{tagJournal}, bytes.Clone(b.Payload)})
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	policy := snapshot.Policy{Version: "v1", Snapshot: snapshot.Triggers{EveryRecords: 1}, KeepSnapshots: 1, RawLog: "truncate", VerifyBeforeDelete: true}
	// The first compaction snapshots; the second truncates below that
	// snapshot, leaving 'r' rows.
	for round := 0; round < 2; round++ {
		if _, err := coveredCompact(t, db, policy, CompactOptions{Apply: true}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 60; i++ {
			if _, err := db.Put(ctx, "a0", []byte("later"), []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.flushIndex(); err != nil {
		t.Fatal(err)
	}
	writeCorpus := func(dir, name string, args ...[]byte) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := "go test fuzz v1\n"
		for _, a := range args {
			body += "[]byte(" + strconv.Quote(string(a)) + ")\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// FuzzAuditLog's mode 0 (first byte 0) takes the rest as the file.
	auditLog, err := fs.Open(db.AuditPath())
	if err != nil {
		t.Fatal(err)
	}
	logBytes, err := io.ReadAll(auditLog)
	auditLog.Close()
	if err != nil || bytes.Count(logBytes, []byte{'\n'}) < 2 {
		t.Fatalf("audit log of %d bytes: %v", len(logBytes), err)
	}
	auditDir := filepath.Join("..", "snapshot", "testdata", "fuzz", "FuzzAuditLog")
	writeCorpus(auditDir, "real-audit-log", append([]byte{0}, logBytes...))
	writeCorpus(auditDir, "real-audit-log-torn", append([]byte{0}, logBytes[:len(logBytes)-40]...))
	// The last line's own hash altered, and a torn tail after it: no
	// crash's shape, which Append and VerifyAudit both refuse.
	tampered := append([]byte{0}, logBytes...)
	at := bytes.LastIndex(tampered, []byte(`"hash":"blake3:`)) + len(`"hash":"blake3:`)
	tampered[at] ^= 1
	writeCorpus(auditDir, "real-audit-log-bad-last-line-torn", append(tampered, `{"seq":`...))
	// The last line repeated: it checks but does not link, which Append
	// and VerifyAudit both refuse.
	lastOff := bytes.LastIndexByte(logBytes[:len(logBytes)-1], '\n') + 1
	writeCorpus(auditDir, "real-audit-log-last-line-repeated", append(append([]byte{0}, logBytes...), logBytes[lastOff:]...))
	dir := filepath.Join("internal", "schema", "testdata", "fuzz", "FuzzIndexRows")
	write := func(name string, k, v []byte) { writeCorpus(dir, name, k, v) }
	it, err := db.index.NewIter(&pebble.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	perTag := map[byte]int{}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		tag := k[0]
		if tag == schema.TagMeta {
			if name := string(k[1:]); name != schema.MetaHistoryFrom && name != schema.MetaSettled {
				continue
			}
		} else if perTag[tag] >= 3 || tag == schema.TagNode {
			continue
		}
		perTag[tag]++
		write(fmt.Sprintf("real-%c-%d", tag, perTag[tag]), k, v)
	}
	for i, r := range journalRows {
		write(fmt.Sprintf("real-j-%d", i+1), r[0], r[1])
	}
}
