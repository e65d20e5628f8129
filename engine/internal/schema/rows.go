package schema

import (
	"fmt"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// RowSetter takes index rows: a batch, or a commit group's sorted 'k' rows.
type RowSetter interface {
	Set(key, value []byte, opts *pebble.WriteOptions) error
}

// VersionRow writes the 'k' row of a put or delete stored at (segno,
// offset) with the given frame size; a put's value is inline when it is at
// most inlineMax bytes. scratch is reused and returned.
func VersionRow(b RowSetter, rec *segment.Record, segno uint64, offset int64, size int, inlineMax int, scratch []byte) []byte {
	ve := Version{Type: VersionPut, Seq: rec.Seq, Time: rec.Time, Hash: rec.Hash, Segno: segno, Offset: offset, Size: uint32(size)}
	if rec.Type == segment.TypeDelete {
		ve.Type = VersionDelete
	} else if len(rec.Value) <= inlineMax {
		ve.Inline, ve.Value = true, rec.Value
	}
	scratch = ve.Append(scratch[:0])
	_ = b.Set(VersionKey(rec.Key, rec.Counter, rec.Anchor), scratch, nil)
	return scratch
}

// RecordRows writes the 's', 'k' and 'i' rows of a record stored at
// (segno, offset) with the given frame size, the 'k' row to versions and
// the others to b. It is the one definition of what the index holds per
// record, shared by commits, adoption at recovery, full rebuilds and
// verify. scratch is reused and returned.
func RecordRows(b, versions RowSetter, rec *segment.Record, segno uint64, offset int64, size int, inlineMax int, scratch []byte) []byte {
	se := Location{Segno: segno, Offset: offset, Size: uint32(size), Counter: rec.Counter, Hash: rec.Hash}
	scratch = se.Append(scratch[:0])
	_ = b.Set(SeqKey(rec.Anchor, rec.Seq), scratch, nil)
	if rec.IsKV() {
		scratch = VersionRow(versions, rec, segno, offset, size, inlineMax, scratch)
	}
	if len(rec.IdempotencyKey) > 0 {
		ie := Idem{Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash,
			Fingerprint: segment.Fingerprint(rec.Type, rec.Key, rec.Value)}
		scratch = ie.Append(scratch[:0])
		_ = b.Set(IdemKey(rec.Anchor, rec.IdempotencyKey), scratch, nil)
	}
	return scratch
}

// StubRows emits the index rows a truncated segment's stub stands for: the
// idempotency keys of its records ('i') and, for each record kept as its
// key's last version in the segment, its version ('k') and frame ('r'),
// exactly as a truncation leaves them. The tag names each row's table.
func StubRows(stub *segment.Stub, emit func(tag byte, k, v []byte)) {
	for _, e := range stub.Idem {
		ie := Idem{Seq: e.Seq, Counter: e.Counter, Hash: stub.HashAt(e.Seq), Fingerprint: e.Fingerprint}
		emit(TagIdem, IdemKey(stub.Anchor, e.Key), ie.Append(nil))
	}
	for i := range stub.Kept {
		KeptRows(stub.Segno, &stub.Kept[i], emit)
	}
}

// KeptRows emits the 'k' and 'r' rows of a record kept from truncated
// segment segno: a put with its value inline, or a delete, at frame size 0.
func KeptRows(segno uint64, rec *segment.Record, emit func(tag byte, k, v []byte)) {
	if !rec.IsKV() {
		return
	}
	ve := Version{Type: VersionPut, Seq: rec.Seq, Time: rec.Time, Hash: rec.Hash, Segno: segno, Inline: true, Value: rec.Value}
	if rec.Type == segment.TypeDelete {
		ve.Type, ve.Inline, ve.Value = VersionDelete, false, nil
	}
	emit(TagKey, VersionKey(rec.Key, rec.Counter, rec.Anchor), ve.Append(nil))
	emit(TagKept, KeptKey(rec.Anchor, rec.Seq), segment.AppendFrame(nil, rec))
}

// RowName names the table of an index row for messages: "'k' row".
func RowName(k []byte) string {
	if len(k) == 0 {
		return "index row"
	}
	return fmt.Sprintf("'%c' row", k[0])
}

// RowSeq returns the seq a 'k' or 'i' row names, or 0.
func RowSeq(k, v []byte) uint64 {
	switch {
	case len(k) > 0 && k[0] == TagKey:
		if e, err := DecodeVersion(v); err == nil {
			return e.Seq
		}
	case len(k) > 0 && k[0] == TagIdem:
		if e, err := DecodeIdem(v); err == nil {
			return e.Seq
		}
	}
	return 0
}
