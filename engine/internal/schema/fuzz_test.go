package schema

import (
	"bytes"
	"testing"

	"github.com/anchordb/anchordb/segment"
)

// tagJournal is not an index table: FuzzIndexRows reads a row with this tag
// as a journal block's payload (DecodeJournalBlock), the other decoder of
// bytes from the database directory. (engine's TestWriteFuzzCorpora writes
// the corpus's real-j-* files with it.)
const tagJournal = 'j'

// FuzzIndexRows: verify, Open and reads decode the index's rows, and
// recovery the journal's blocks; anyone who can write the database
// directory can change them, and damage must be an error (the engine makes
// it INT_004), never a panic. The input is one row, key and value, decoded
// as the engine decodes a row of the key's table (its first byte): 'k' the
// version key and entry, 's' the seq row, 'i' the idempotency entry, 'a'
// the anchor metadata, 'r' the kept frame, 'm' the history_from row; 'j'
// takes the value for a journal block payload. Every decoder here has one
// encoding per value, so whatever one accepts must encode back to the same
// bytes. (The settle point row's codec is internal/journal's Pos, tested
// there.)
func FuzzIndexRows(f *testing.F) {
	frame := segment.AppendFrame(nil, fuzzRecord(f, "a", 1))
	f.Add(VersionKey([]byte("k\x00ey"), 7, "a"), (&Version{Type: VersionPut, Seq: 1, Time: 5, Hash: segment.Hash{1}, Segno: 1, Offset: 40, Size: 90, Inline: true, Value: []byte("v")}).Append(nil))
	f.Add(VersionKey(nil, 1, "é"), (&Version{Type: VersionDelete, Seq: 2, Segno: 1}).Append(nil))
	f.Add(SeqKey("a", 3), (&Location{Segno: 1, Offset: 40, Size: 90, Counter: 9, Hash: segment.Hash{2}}).Append(nil))
	f.Add(IdemKey("a", []byte("req-1")), (&Idem{Seq: 1, Counter: 2, Hash: segment.Hash{3}, Fingerprint: segment.Hash{4}}).Append(nil))
	f.Add(AnchorKey("a"), (&AnchorMeta{ActiveSegno: 2, ActiveFirstSeq: 40, Damage: "segment 1: torn"}).Append(nil))
	f.Add(KeptKey("a", 1), frame)
	f.Add(MetaKey(MetaHistoryFrom), EncodeHistoryFrom(map[string]uint64{"a": 3, "b": 1}))
	f.Add([]byte{tagJournal}, append(be.AppendUint32(nil, 1), AppendJournalRecord(nil, "a", 1, 0, frame)...))
	f.Add([]byte{tagJournal}, be.AppendUint32(nil, 1<<31))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		if len(key) == 0 {
			return
		}
		switch key[0] {
		case TagKey:
			fuzzVersionRow(t, key, value)
		case TagSeq:
			prefix, ok := rowPrefix(key)
			if !ok {
				return
			}
			seq, ok := SeqOf(len(prefix), key)
			if !ok {
				return
			}
			loc, err := DecodeLocation(value)
			if err != nil {
				return
			}
			anchor := string(prefix[1 : len(prefix)-1])
			if !bytes.Equal(SeqKey(anchor, seq), key) || !bytes.Equal(loc.Append(nil), value) {
				t.Fatalf("seq row decodes as %d %+v, which encodes to other bytes", seq, loc)
			}
		case TagIdem:
			if e, err := DecodeIdem(value); err == nil && !bytes.Equal(e.Append(nil), value) {
				t.Fatalf("idempotency entry decodes as %+v, which encodes to other bytes", e)
			}
		case TagAnchor:
			if m, err := DecodeAnchorMeta(value); err == nil && !bytes.Equal(m.Append(nil), value) {
				t.Fatalf("anchor metadata decodes as %+v, which encodes to other bytes", m)
			}
		case TagKept:
			prefix, ok := rowPrefix(key)
			if !ok {
				return
			}
			// verify takes the row only when the frame fills it.
			rec, n, err := segment.ParseFrame(string(prefix[1:len(prefix)-1]), value)
			if err == nil && n == len(value) && !bytes.Equal(segment.AppendFrame(nil, &rec), value) {
				t.Fatalf("kept frame decodes as %+v, which encodes to other bytes", rec)
			}
		case TagMeta:
			if string(key[1:]) == MetaHistoryFrom {
				if m, err := DecodeHistoryFrom(value); err == nil && !bytes.Equal(EncodeHistoryFrom(m), value) {
					t.Fatalf("history_from decodes as %v, which encodes to other bytes", m)
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
	k, counter, anchor, err := ParseVersionKey(key)
	if err == nil {
		if !bytes.Equal(VersionKey(k, counter, anchor), key) {
			t.Fatalf("version key decodes as (%x, %d, %q), which encodes to other bytes", k, counter, anchor)
		}
		// The form that reuses buffers appends, after what they hold.
		k2, a2, c2, err := AppendVersionKeyParts([]byte("x"), []byte("y"), key)
		if err != nil || !bytes.Equal(k2, append([]byte("x"), k...)) || string(a2) != "y"+anchor || c2 != counter {
			t.Fatalf("AppendVersionKeyParts disagrees with ParseVersionKey: (%x, %q, %d), %v", k2, a2, c2, err)
		}
	}
	if a, ok := VersionKeyAnchor(nil, key); ok != (err == nil) || ok && string(a) != anchor {
		t.Fatalf("VersionKeyAnchor: %q, %v; ParseVersionKey: %q, %v", a, ok, anchor, err)
	}
	v, err := DecodeVersion(value)
	kind := KindOf(value)
	if err != nil {
		if kind != Located {
			t.Fatalf("a 'k' value that does not decode is kind %d, not located", kind)
		}
		return
	}
	if !bytes.Equal(v.Append(nil), value) {
		t.Fatalf("version entry decodes as %+v, which encodes to other bytes", v)
	}
}

// fuzzJournalPayload: an accepted journal block payload is the count and the
// records as the writer appends them.
func fuzzJournalPayload(t *testing.T, payload []byte) {
	var recs []JournalRecord
	err := DecodeJournalBlock(payload, func(r JournalRecord) error {
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
		again = AppendJournalRecord(again, r.Anchor, r.Segno, r.Offset, r.Frame)
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
