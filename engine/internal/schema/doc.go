// Package schema is the layout of the index, the Pebble store under index/:
// the key and value of every row, the names and values of the meta rows,
// the rows one record puts there, and the journal's block payload, which
// recovery turns back into these rows. docs/FORMAT.md §6 is the normative
// description, with worked examples; this table is its summary.
//
// Every key begins with a one-byte table tag:
//
//	tag  key                                 value                                    written by
//	'a'  a ‖ id                              v1 ‖ segno ‖ first seq ‖ damage text      leader (new anchor, seal, damage), recovery, rebuilds
//	'i'  i ‖ id ‖ 0x00 ‖ idempotency key     seq ‖ counter ‖ hash ‖ fingerprint        every record with a key; stubs' keys
//	'k'  k ‖ esc(key) ‖ 0x00 0x01 ‖ ^counter ‖ desc(id) ‖ 0xFF
//	                                         type ‖ seq ‖ time ‖ hash ‖ segno ‖ offset ‖ size ‖ inline ‖ value
//	                                         located (size > 0) | kept (segno ≠ 0, size 0) | deferred (segno 0)
//	'm'  m ‖ name                            see the Meta* names                       Open, settle, audit appends, rebuilds
//	'n'  n ‖ id ‖ 0x00 ‖ u8 level ‖ u64 index
//	                                         32-byte node hash; levels 8, 16, …        the applier, with the record completing the subtree
//	'r'  r ‖ id ‖ 0x00 ‖ u64 seq             the record's frame                        truncation: a key's last version in a removed segment
//	's'  s ‖ id ‖ 0x00 ‖ u64 seq             segno ‖ offset ‖ size ‖ counter ‖ hash    every record (size 0 once its segment is truncated)
//
// Anchor ids never contain 0x00 (they have no control characters), so 0x00
// ends them without escaping and byte order of ids is preserved. User keys
// may contain anything, so they are escaped (0x00 → 0x00 0xFF) and end with
// 0x00 0x01: byte order of keys is preserved and no key's versions can
// interleave with another's.
//
// The package is pure: it encodes and decodes bytes and writes rows into
// whatever takes them (RowSetter). Its decoders return plain errors; the
// engine attaches the error codes (a row that does not decode is INT_004).
package schema

import "encoding/binary"

var be = binary.BigEndian
