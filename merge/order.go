// Package merge computes the merged order of anchordb (CONTRACT §1): every record
// of every anchor, sorted by (counter, anchor id as raw bytes).
//
// The order is a pure function of the records. Counters are strictly
// increasing within an anchor, so no two valid records share a (counter,
// anchor) pair and the order is total; ties on the counter are broken by
// comparing anchor ids byte by byte — never by locale, never by Unicode
// normalisation ("e\u0301" and "é" are different ids and sort apart).
//
// The package holds three things, all free of I/O:
//
//   - Compare / Less: the order itself.
//   - Merge: a streaming k-way merge of per-anchor record sources, with global
//     1-based positions, memory O(k) whatever the length of the logs.
//   - Frontier: a vector {anchor id → seq} naming a prefix of every log, with
//     a canonical binary encoding, a JSON form and a hash; and RootBuilder, an
//     RFC 6962 root over the records in merged order, so two machines compare
//     their merged views by one hash.
package merge

import (
	"cmp"
	"strings"

	"github.com/anchordb/anchordb/segment"
)

// Compare orders two records in merged order: by counter, then by anchor id
// compared as raw bytes. It returns -1, 0 or +1. It fits slices.SortFunc.
// Two records of the same anchor with the same counter compare equal; a valid
// set of logs has none.
func Compare(a, b segment.Record) int {
	return CompareKeys(a.Counter, a.Anchor, b.Counter, b.Anchor)
}

// Less reports whether a comes before b in merged order.
func Less(a, b segment.Record) bool {
	return CompareKeys(a.Counter, a.Anchor, b.Counter, b.Anchor) < 0
}

// CompareKeys is Compare on the two fields the order depends on, for callers
// (indexes, cursors) that hold the keys without whole records. Go compares
// strings byte by byte, which is exactly the order CONTRACT §1 asks for.
func CompareKeys(counterA uint64, anchorA string, counterB uint64, anchorB string) int {
	if c := cmp.Compare(counterA, counterB); c != 0 {
		return c
	}
	return strings.Compare(anchorA, anchorB)
}
