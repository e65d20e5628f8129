package snapshot

import (
	"bytes"
	"encoding/binary"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// StateHasher computes the state hash of CONTRACT §6: BLAKE3 derive-key
// (ContextState, "anchordb 2026-11 state v1") over the live (key, value)
// pairs in ascending key byte order, each pair as
//
//	+-----------+-----+-------------+-------+
//	| keyLen    | key | valueLen    | value |
//	| u64 BE    |     | u64 BE      |       |
//	+-----------+-----+-------------+-------+
//
// The lengths make the encoding injective, so two different states never
// hash alike by re-splitting bytes. The hash depends only on the key→value
// map: versions, compression and file layout do not enter it, so the engine
// proves a snapshot by replaying the log to its frontier, feeding the
// resulting pairs here, and comparing. The empty state hashes to
// derive-key(ContextState, "").
//
// Memory is one copy of the previous key (and a scratch buffer), whatever
// the state's size.
type StateHasher struct {
	h       *blake3.Hasher
	prev    []byte
	scratch []byte
	n       uint64
}

// NewStateHasher returns a hasher for an empty state.
func NewStateHasher() *StateHasher {
	return &StateHasher{h: blake3.NewDeriveKey(ContextState)}
}

// Add appends the next pair. Keys must be non-empty and strictly ascending;
// otherwise Add returns INPUT_001 and the hasher is unchanged.
func (s *StateHasher) Add(key, value []byte) error {
	if len(key) == 0 {
		return errs.New(errs.CodeInvalidInput, "state entry %d has an empty key", s.n)
	}
	if s.n > 0 && bytes.Compare(key, s.prev) <= 0 {
		return errs.New(errs.CodeInvalidInput, "state key %q does not follow %q (keys must be strictly ascending)", key, s.prev)
	}
	// NB: one Write per pair is markedly faster than four small ones; large
	// values go straight through rather than through the scratch buffer.
	b := binary.BigEndian.AppendUint64(s.scratch[:0], uint64(len(key)))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(value)))
	if len(value) <= 4096 {
		b = append(b, value...)
		_, _ = s.h.Write(b)
	} else {
		_, _ = s.h.Write(b)
		_, _ = s.h.Write(value)
	}
	s.scratch = b[:0]
	s.prev = append(s.prev[:0], key...)
	s.n++
	return nil
}

// Count returns the number of pairs added.
func (s *StateHasher) Count() uint64 { return s.n }

// Sum returns the state hash of the pairs added so far. It does not change
// the hasher.
func (s *StateHasher) Sum() segment.Hash {
	var out segment.Hash
	s.h.Sum(out[:0])
	return out
}
