package engine

import (
	"errors"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// ingestIdemInMemory is how many idempotency keys of one arriving log an
// ingest's first pass holds in memory (their 32-byte hashes, about 64 MiB
// with the map's overhead at the default) before it moves the rest to a
// scratch store. A variable so tests can spill.
var ingestIdemInMemory = 1 << 20

// idemSet holds the hashes of the idempotency keys an arriving log has used
// so far, so a key used twice in it is refused (SPEC §7). NB: the log is the
// source's, of any length — a 1 TiB segment holds billions of records — so
// the set must not grow in memory with it: past ingestIdemInMemory keys it
// goes on in a scratch Pebble store under the database's tmp directory
// (openScratch), which close removes.
type idemSet struct {
	db    *DB
	mem   map[[32]byte]struct{}
	store *pebble.DB
	done  func()
}

// has reports whether h was added.
func (s *idemSet) has(h [32]byte) (bool, error) {
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
		return false, errs.Wrap(errs.CodeWriteFailed, err, "read the ingest's idempotency key store")
	}
	_ = closer.Close()
	return true, nil
}

// add adds h.
func (s *idemSet) add(h [32]byte) error {
	if s.store == nil && len(s.mem) < ingestIdemInMemory {
		if s.mem == nil {
			s.mem = make(map[[32]byte]struct{})
		}
		s.mem[h] = struct{}{}
		return nil
	}
	if s.store == nil {
		store, done, err := s.db.openScratch("ingest-idem")
		if err != nil {
			return err
		}
		s.store, s.done = store, done
	}
	if err := s.store.Set(h[:], nil, pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write the ingest's idempotency key store")
	}
	return nil
}

// close drops the set and removes its scratch store, if any.
func (s *idemSet) close() {
	if s.done != nil {
		s.done()
	}
	s.mem, s.store, s.done = nil, nil, nil
}
