package schema

import (
	"bytes"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/segment"
)

func record(anchor string, seq uint64, typ string, key, value, idem string) *segment.Record {
	rec := &segment.Record{Anchor: anchor, Seq: seq, Counter: seq + 10, Time: 1, Type: typ, Key: []byte(key),
		Value: []byte(value), IdempotencyKey: []byte(idem), PrevHash: segment.GenesisHash(anchor)}
	if idem == "" {
		rec.IdempotencyKey = nil
	}
	rec.Hash = rec.ComputeHash()
	return rec
}

// TestStubRows: a stub stands for the 'i' rows of its records' keys and the
// 'k' and 'r' rows of the records it kept: a put with its value inline, a
// delete with none, both at frame size 0 in the stub's segment.
func TestStubRows(t *testing.T) {
	put := record("a", 2, segment.TypePut, "k1", "v1", "")
	del := record("a", 3, segment.TypeDelete, "k2", "", "")
	ev := record("a", 4, "event", "", "", "")
	stub := &segment.Stub{Anchor: "a", Segno: 7, FirstSeq: 1, Hashes: []segment.Hash{{1}, put.Hash, del.Hash, ev.Hash},
		Kept: []segment.Record{*put, *del, *ev},
		Idem: []segment.StubIdem{{Seq: 1, Counter: 11, Fingerprint: segment.Hash{9}, Key: []byte("req")}}}
	rows := map[string][]byte{}
	tags := map[byte]int{}
	StubRows(stub, func(tag byte, k, v []byte) {
		if k[0] != tag {
			t.Errorf("row %x emitted as table %c", k, tag)
		}
		tags[tag]++
		rows[string(k)] = v
	})
	if tags[TagIdem] != 1 || tags[TagKey] != 2 || tags[TagKept] != 2 || len(tags) != 3 {
		t.Fatalf("rows per table: %v; want 1 'i', 2 'k', 2 'r' (an event has no version)", tags)
	}
	idem, err := DecodeIdem(rows[string(IdemKey("a", []byte("req")))])
	if err != nil || idem != (Idem{Seq: 1, Counter: 11, Hash: segment.Hash{1}, Fingerprint: segment.Hash{9}}) {
		t.Fatalf("'i' row: %+v, %v", idem, err)
	}
	pv, err := DecodeVersion(rows[string(VersionKey([]byte("k1"), put.Counter, "a"))])
	if err != nil || !pv.Inline || string(pv.Value) != "v1" || pv.Segno != 7 || pv.Size != 0 || KindOf(rows[string(VersionKey([]byte("k1"), put.Counter, "a"))]) != Kept {
		t.Fatalf("kept put: %+v, %v", pv, err)
	}
	dv, err := DecodeVersion(rows[string(VersionKey([]byte("k2"), del.Counter, "a"))])
	if err != nil || dv.Type != VersionDelete || dv.Inline || dv.Segno != 7 {
		t.Fatalf("kept delete: %+v, %v", dv, err)
	}
	frame := rows[string(KeptKey("a", 3))]
	if rec, n, err := segment.ParseFrame("a", frame); err != nil || n != len(frame) || rec.Hash != del.Hash {
		t.Fatalf("'r' row of the delete: %+v, %d of %d bytes, %v", rec, n, len(frame), err)
	}
}

// TestJournalBlockRoundTrip: a payload of records decodes to the records
// and the places their frames go, and bytes after the last record are an
// error that counts the records.
func TestJournalBlockRoundTrip(t *testing.T) {
	recs := []*segment.Record{record("a", 1, segment.TypePut, "k", "v", "r1"), record("bb", 1, "event", "", "", "")}
	payload := be.AppendUint32(nil, uint32(len(recs)))
	for i, r := range recs {
		payload = AppendJournalRecord(payload, r.Anchor, uint64(i+1), int64(100*i), segment.AppendFrame(nil, r))
	}
	var got []JournalRecord
	if err := DecodeJournalBlock(payload, func(r JournalRecord) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Anchor != "bb" || got[1].Segno != 2 || got[1].Offset != 100 || got[0].Rec.Hash != recs[0].Hash ||
		!bytes.Equal(got[0].Frame, segment.AppendFrame(nil, recs[0])) {
		t.Fatalf("decoded %+v", got)
	}
	if n := len(payload) - 4 - 2*JournalRecordOverhead - len("a") - len("bb") - len(got[0].Frame) - len(got[1].Frame); n != 0 {
		t.Fatalf("payload has %d bytes beyond the overhead and the frames", n)
	}
	one := be.AppendUint32(nil, 1)
	one = AppendJournalRecord(one, "a", 1, 0, got[0].Frame)
	err := DecodeJournalBlock(append(one, 0), func(JournalRecord) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "has 1 bytes after its 1 record") {
		t.Fatalf("a byte after the last record: %v", err)
	}
	if err := DecodeJournalBlock(be.AppendUint32(nil, 2), func(JournalRecord) error { return nil }); err == nil {
		t.Fatal("a payload that promises records it lacks decoded")
	}
}
