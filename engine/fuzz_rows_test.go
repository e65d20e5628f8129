package engine

// FuzzIndexRows lives in package engine, not in fuzz/ with the other
// cross-package targets (as FuzzImportLine lives in cmd/anchordb): the row
// decoders and encoders are unexported, and exporting them for a test would
// put the index's layout into the engine's API.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// tagJournal is not an index table: FuzzIndexRows reads a row with this tag
// as a journal block's payload (decodeJournalBlock), the other engine
// decoder of bytes from the database directory.
const tagJournal = 'j'

// FuzzIndexRows: verify, Open and reads decode the index's rows, and
// recovery the journal's blocks; anyone who can write the database
// directory can change them, and damage must be a finding (INT_004), never a
// panic. The input is one row, key and value, decoded as the engine decodes
// a row of the key's table (its first byte): 'k' the version key and entry,
// 's' the seq row, 'i' the idempotency entry, 'a' the anchor metadata, 'r'
// the retained frame, 'm' the history_from and settle point rows; 'j' takes
// the value for a journal block payload. Every decoder here has one encoding
// per value, so whatever one accepts must encode back to the same bytes.
func FuzzIndexRows(f *testing.F) {
	frame := segment.AppendFrame(nil, fuzzRecord(f, "a", 1))
	f.Add(versionKey([]byte("k\x00ey"), 7, "a"), (&versionEntry{Type: verPut, Seq: 1, Time: 5, Hash: segment.Hash{1}, Segno: 1, Offset: 40, Size: 90, Inline: true, Value: []byte("v")}).encode(nil))
	f.Add(versionKey(nil, 1, "é"), (&versionEntry{Type: verDelete, Seq: 2, Segno: 1}).encode(nil))
	f.Add(seqKey("a", 3), (&seqEntry{Segno: 1, Offset: 40, Size: 90, Counter: 9, Hash: segment.Hash{2}}).encode(nil))
	f.Add(idemKey("a", []byte("req-1")), (&idemEntry{Seq: 1, Counter: 2, Hash: segment.Hash{3}, Fingerprint: segment.Hash{4}}).encode(nil))
	f.Add(anchorKey("a"), (&anchorMeta{ActiveSegno: 2, ActiveFirstSeq: 40, Damage: "segment 1: torn"}).encode(nil))
	f.Add(retainedKey("a", 1), frame)
	f.Add(metaKey(metaHistoryFrom), encodeHistoryFrom(map[string]uint64{"a": 3, "b": 1}))
	f.Add(metaKey(metaSettled), journal.Pos{Gen: 2, Off: 4096}.AppendBinary(nil))
	f.Add([]byte{tagJournal}, append(be.AppendUint32(nil, 1), appendJournalRecord(nil, "a", 1, 0, frame)...))
	f.Add([]byte{tagJournal}, be.AppendUint32(nil, 1<<31))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		if len(key) == 0 {
			return
		}
		switch key[0] {
		case tagKey:
			fuzzVersionRow(t, key, value)
		case tagSeq:
			prefix, ok := rowPrefix(key)
			if !ok {
				return
			}
			r, _, err := decodeSeqRow(prefix, key, value)
			if err != nil {
				if errs.CodeOf(err) != errs.CodeIndexMismatch {
					t.Fatalf("seq row refused with %v, not INT_004", err)
				}
				return
			}
			anchor := string(prefix[1 : len(prefix)-1])
			if !bytes.Equal(seqKey(anchor, r.seq), key) || !bytes.Equal(r.seqEntry.encode(nil), value) {
				t.Fatalf("seq row decodes as %d %+v, which encodes to other bytes", r.seq, r.seqEntry)
			}
		case tagIdem:
			if e, err := decodeIdemEntry(value); err == nil && !bytes.Equal(e.encode(nil), value) {
				t.Fatalf("idempotency entry decodes as %+v, which encodes to other bytes", e)
			}
		case tagAnchor:
			if m, err := decodeAnchorMeta(value); err == nil && !bytes.Equal(m.encode(nil), value) {
				t.Fatalf("anchor metadata decodes as %+v, which encodes to other bytes", m)
			}
		case tagRetain:
			prefix, ok := rowPrefix(key)
			if !ok {
				return
			}
			// verify takes the row only when the frame fills it.
			rec, n, err := segment.ParseFrame(string(prefix[1:len(prefix)-1]), value)
			if err == nil && n == len(value) && !bytes.Equal(segment.AppendFrame(nil, &rec), value) {
				t.Fatalf("retained frame decodes as %+v, which encodes to other bytes", rec)
			}
		case tagMeta:
			switch string(key[1:]) {
			case metaHistoryFrom:
				m, err := decodeHistoryFrom(value)
				if err != nil {
					if errs.CodeOf(err) != errs.CodeIndexMismatch {
						t.Fatalf("history_from refused with %v, not INT_004", err)
					}
					return
				}
				if !bytes.Equal(encodeHistoryFrom(m), value) {
					t.Fatalf("history_from decodes as %v, which encodes to other bytes", m)
				}
			case metaSettled:
				if p, err := journal.DecodePos(value); err == nil && !bytes.Equal(p.AppendBinary(nil), value) {
					t.Fatalf("settle point decodes as %v, which encodes to other bytes", p)
				}
			}
		case tagJournal:
			fuzzJournalPayload(t, value)
		}
	})
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

func fuzzVersionRow(t *testing.T, key, value []byte) {
	k, counter, anchor, err := parseVersionKey(key)
	if err == nil {
		if !bytes.Equal(versionKey(k, counter, anchor), key) {
			t.Fatalf("version key decodes as (%x, %d, %q), which encodes to other bytes", k, counter, anchor)
		}
		// The form that reuses buffers appends, after what they hold.
		k2, a2, c2, err := appendVersionKeyParts([]byte("x"), []byte("y"), key)
		if err != nil || !bytes.Equal(k2, append([]byte("x"), k...)) || string(a2) != "y"+anchor || c2 != counter {
			t.Fatalf("appendVersionKeyParts disagrees with parseVersionKey: (%x, %q, %d), %v", k2, a2, c2, err)
		}
	}
	v, err := decodeVersionEntry(value)
	kind := versionKind(value)
	if err != nil {
		if kind != versionLocated {
			t.Fatalf("a 'k' value that does not decode is kind %d, not located", kind)
		}
		return
	}
	if !bytes.Equal(v.encode(nil), value) {
		t.Fatalf("version entry decodes as %+v, which encodes to other bytes", v)
	}
}

// fuzzJournalPayload: an accepted journal block payload is the count and the
// records as the writer appends them.
func fuzzJournalPayload(t *testing.T, payload []byte) {
	var recs []journalRecord
	err := decodeJournalBlock(payload, func(r journalRecord) error {
		if !bytes.Equal(segment.AppendFrame(nil, &r.Rec), r.Frame) {
			t.Fatalf("journal record %d: its frame decodes as %+v, which encodes to other bytes", len(recs)+1, r.Rec)
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return
	}
	again := be.AppendUint32(nil, uint32(len(recs)))
	for _, r := range recs {
		again = appendJournalRecord(again, r.Anchor, r.Segno, r.Offset, r.Frame)
	}
	if !bytes.Equal(again, payload) {
		t.Fatalf("journal payload of %d records encodes to other bytes", len(recs))
	}
}

// fuzzRecord is a valid record of anchor at seq, for seeds.
func fuzzRecord(t testing.TB, anchor string, seq uint64) *segment.Record {
	t.Helper()
	rec := &segment.Record{Anchor: anchor, Seq: seq, Counter: seq, Time: 1, Type: "put", Key: []byte("k"), Value: []byte("v"), PrevHash: segment.GenesisHash(anchor)}
	rec.Hash = rec.ComputeHash()
	return rec
}

// TestWriteFuzzCorpora writes the real-* files of FuzzIndexRows' committed
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
	dir := filepath.Join("testdata", "fuzz", "FuzzIndexRows")
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
		if tag == tagMeta {
			if name := string(k[1:]); name != metaHistoryFrom && name != metaSettled {
				continue
			}
		} else if perTag[tag] >= 3 || tag == tagNode {
			continue
		}
		perTag[tag]++
		write(fmt.Sprintf("real-%c-%d", tag, perTag[tag]), k, v)
	}
	for i, r := range journalRows {
		write(fmt.Sprintf("real-j-%d", i+1), r[0], r[1])
	}
}
