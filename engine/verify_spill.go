package engine

import (
	"bytes"
	"slices"
	"sort"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// rowSpillBytes is how many bytes of 'k' rows a rowSpill keeps in memory
// before it moves them to a scratch store. A variable so tests can spill.
var rowSpillBytes = 64 << 20

// rowSpill collects the 'k' rows verify checks after its pass over them
// (the rows kept for truncated records, and those a rebuild from a
// snapshot wrote), and gives them back in record order (anchor, then seq).
// A rebuild from a snapshot writes one such row per key of the snapshot's
// state, so there may be as many as the index has keys: past
// rowSpillBytes they go to a scratch Pebble store beside the database
// (tmp/, removed when verify ends), which sorts them on disk, and verify's
// memory stays bounded whatever the database's size.
type rowSpill struct {
	db      *DB
	purpose string

	rows  []retainedRow // in memory, until spilled
	seqs  []uint64      // seqs[i] is rows[i]'s
	bytes int

	store *pebble.DB // the scratch store, once spilled
	done  func()
	batch *pebble.Batch
	key   []byte
}

func newRowSpill(db *DB, purpose string) *rowSpill {
	return &rowSpill{db: db, purpose: purpose}
}

// add keeps a copy of the row k = v of anchor, whose record is seq.
func (s *rowSpill) add(anchor []byte, seq uint64, k, v []byte) error {
	if s.store == nil {
		s.rows = append(s.rows, retainedRow{anchor: string(anchor), key: slices.Clone(k), value: slices.Clone(v)})
		s.seqs = append(s.seqs, seq)
		s.bytes += len(anchor) + len(k) + len(v) + 64
		if s.bytes <= rowSpillBytes {
			return nil
		}
		return s.spill()
	}
	return s.put(anchor, seq, k, v)
}

// spill opens the scratch store and moves the rows in memory to it.
func (s *rowSpill) spill() error {
	store, done, err := s.db.openScratch(s.purpose)
	if err != nil {
		return err
	}
	s.store, s.done, s.batch = store, done, store.NewBatch()
	rows, seqs := s.rows, s.seqs
	s.rows, s.seqs, s.bytes = nil, nil, 0
	for i, r := range rows {
		if err := s.put([]byte(r.anchor), seqs[i], r.key, r.value); err != nil {
			return err
		}
	}
	return nil
}

// put adds a row to the scratch store under anchor ‖ 0x00 ‖ seq ‖ k: anchor
// ids hold no 0x00, so byte order is (anchor, seq) order, and k keeps two
// rows that name the same seq (a damaged index may hold them) apart.
func (s *rowSpill) put(anchor []byte, seq uint64, k, v []byte) error {
	s.key = append(append(s.key[:0], anchor...), 0)
	s.key = append(be.AppendUint64(s.key, seq), k...)
	_ = s.batch.Set(s.key, v, nil)
	if s.batch.Len() < 4<<20 {
		return nil
	}
	return s.flush()
}

func (s *rowSpill) flush() error {
	if err := s.batch.Commit(pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write the %s store", s.purpose)
	}
	s.batch.Reset()
	return nil
}

// each calls fn with every row in record order until fn returns false.
func (s *rowSpill) each(fn func(r retainedRow) bool) error {
	if s.store == nil {
		sort.Sort(rowsInRecordOrder{s.rows, s.seqs})
		for _, r := range s.rows {
			if !fn(r) {
				return nil
			}
		}
		return nil
	}
	if err := s.flush(); err != nil {
		return err
	}
	it, err := s.store.NewIter(nil)
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read the %s store", s.purpose)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		i := bytes.IndexByte(k, 0)
		if i < 0 || len(k) < i+1+8 {
			return errs.New(errs.CodeWriteFailed, "the %s store holds a malformed key %x", s.purpose, k)
		}
		// The iterator's buffers are reused: the row is a copy, as in memory.
		r := retainedRow{anchor: string(k[:i]), key: slices.Clone(k[i+1+8:]), value: slices.Clone(it.Value())}
		if !fn(r) {
			return nil
		}
	}
	if err := it.Error(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read the %s store", s.purpose)
	}
	return nil
}

// close removes the scratch store, if any.
func (s *rowSpill) close() {
	if s == nil {
		return
	}
	if s.batch != nil {
		_ = s.batch.Close()
		s.batch = nil
	}
	if s.done != nil {
		s.done()
		s.done = nil
	}
	s.rows, s.seqs = nil, nil
}
