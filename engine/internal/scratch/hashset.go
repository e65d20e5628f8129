package scratch

import (
	"errors"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// DefaultInMemory is how many hashes a HashSet holds in memory (about
// 64 MiB with the map's overhead) before it moves the rest to a scratch
// store, unless told otherwise.
const DefaultInMemory = 1 << 20

// HashSet is a set of 32-byte hashes that grows in memory up to a bound
// and on in a scratch store past it: an ingest holds the hashes of the
// idempotency keys an arriving log has used, and the log is the source's,
// of any length (a 1 TiB segment holds billions of records), so the set
// must not grow in memory with it. Close removes the store.
type HashSet struct {
	open     Opener
	purpose  string
	what     string
	inMemory int

	mem   map[[32]byte]struct{}
	store *Store
}

// NewHashSet returns an empty set that holds up to inMemory hashes in
// memory (DefaultInMemory, or less in tests) and past that goes on in a
// store open opens for purpose; what names the set in errors ("read the
// <what>").
func NewHashSet(open Opener, purpose, what string, inMemory int) *HashSet {
	return &HashSet{open: open, purpose: purpose, what: what, inMemory: inMemory}
}

// Has reports whether h was added.
func (s *HashSet) Has(h [32]byte) (bool, error) {
	if _, ok := s.mem[h]; ok {
		return true, nil
	}
	if s.store == nil {
		return false, nil
	}
	_, closer, err := s.store.Get(h[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, errs.Wrap(errs.CodeWriteFailed, err, "read the %s", s.what)
	}
	_ = closer.Close()
	return true, nil
}

// Add adds h.
func (s *HashSet) Add(h [32]byte) error {
	if s.store == nil && len(s.mem) < s.inMemory {
		if s.mem == nil {
			s.mem = make(map[[32]byte]struct{})
		}
		s.mem[h] = struct{}{}
		return nil
	}
	if s.store == nil {
		store, err := s.open(s.purpose)
		if err != nil {
			return err
		}
		s.store = store
	}
	if err := s.store.Set(h[:], nil, pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write the %s", s.what)
	}
	return nil
}

// Close drops the set and removes its scratch store, if any.
func (s *HashSet) Close() {
	if s.store != nil {
		s.store.Close()
	}
	s.mem, s.store = nil, nil
}
