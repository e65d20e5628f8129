package schema

import (
	"fmt"

	"github.com/anchordb/anchordb/segment"
)

// A journal block's payload is a record count and the records of one commit
// group, each with where its frame goes:
//
//	u32 count, then count times:
//	+-----------+-----------+-------+--------+---------------------------+
//	| anchorLen | anchor id | segno | offset | frame (as in the segment) |
//	| u8        | anchorLen | u64   | u64    | u32 len ‖ body ‖ hash     |
//	+-----------+-----------+-------+--------+---------------------------+

// JournalRecordOverhead is what a journal record adds to its anchor id and
// frame: the id's length, the segno and the offset.
const JournalRecordOverhead = 1 + 8 + 8

// AppendJournalRecord appends one record of a block payload to dst: the
// frame, and where it goes (segment segno of the anchor, at offset).
func AppendJournalRecord(dst []byte, anchor string, segno uint64, offset int64, frame []byte) []byte {
	dst = append(dst, byte(len(anchor)))
	dst = append(dst, anchor...)
	dst = be.AppendUint64(dst, segno)
	dst = be.AppendUint64(dst, uint64(offset))
	return append(dst, frame...)
}

// JournalRecord is one record read back from the journal.
type JournalRecord struct {
	Anchor string
	Segno  uint64
	Offset int64
	Frame  []byte // aliases the block payload
	Rec    segment.Record
}

// DecodeJournalBlock parses a block payload, checking every frame's hash,
// and calls fn with each record in order; an error of fn ends the parse and
// is returned.
func DecodeJournalBlock(payload []byte, fn func(JournalRecord) error) error {
	if len(payload) < 4 {
		return fmt.Errorf("journal block of %d bytes has no record count", len(payload))
	}
	n := be.Uint32(payload)
	p := payload[4:]
	for i := uint32(0); i < n; i++ {
		if len(p) < 1 || len(p) < 1+int(p[0])+16+4 {
			return fmt.Errorf("journal record %d of %d is cut short", i+1, n)
		}
		aLen := int(p[0])
		r := JournalRecord{Anchor: string(p[1 : 1+aLen])}
		p = p[1+aLen:]
		r.Segno = be.Uint64(p)
		r.Offset = int64(be.Uint64(p[8:]))
		p = p[16:]
		rec, size, err := segment.ParseFrame(r.Anchor, p)
		if err != nil {
			return fmt.Errorf("journal record %d of %d (anchor %q): %w", i+1, n, r.Anchor, err)
		}
		r.Frame, r.Rec = p[:size], rec
		p = p[size:]
		if err := fn(r); err != nil {
			return err
		}
	}
	if len(p) != 0 {
		records := "records"
		if n == 1 {
			records = "record"
		}
		return fmt.Errorf("journal block has %d bytes after its %d %s", len(p), n, records)
	}
	return nil
}
