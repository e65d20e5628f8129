package scratch

import (
	"bytes"
	"encoding/binary"
	"slices"
	"sort"
	"strings"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/cockroachdb/pebble/v2"
)

// DefaultSpillBytes is how many bytes of rows a RowSpill keeps in memory
// before it moves them to a scratch store, unless told otherwise.
const DefaultSpillBytes = 64 << 20

// Row is one row a RowSpill gives back: its group (verify's: the anchor)
// and its key and value, copies the caller may keep.
type Row struct {
	Group      string
	Key, Value []byte
}

// RowSpill collects rows and gives them back in (group, seq) order, where
// seq is a number the caller gives each row (verify's: the seq of the
// row's record; two rows may share one). Past its bound the rows go to a
// scratch store, which sorts them on disk, so memory stays bounded however
// many rows there are: verify collects the 'k' rows it checks after its
// pass over them (the rows kept for truncated records, and those a rebuild
// from a snapshot wrote, one per key of the snapshot's state).
type RowSpill struct {
	open       Opener
	purpose    string
	spillBytes int

	rows  []Row    // in memory, until spilled
	seqs  []uint64 // seqs[i] is rows[i]'s
	bytes int

	store *Store // the scratch store, once spilled
	batch *pebble.Batch
	key   []byte
}

// NewRowSpill returns an empty RowSpill that keeps up to spillBytes of rows
// in memory (DefaultSpillBytes, or less in tests) and past that spills to a
// store open opens for purpose.
func NewRowSpill(open Opener, purpose string, spillBytes int) *RowSpill {
	return &RowSpill{open: open, purpose: purpose, spillBytes: spillBytes}
}

// Add keeps a copy of the row k = v of group, numbered seq. A group holds
// no 0x00 byte (anchor ids have none).
func (s *RowSpill) Add(group []byte, seq uint64, k, v []byte) error {
	if s.store == nil {
		s.rows = append(s.rows, Row{Group: string(group), Key: slices.Clone(k), Value: slices.Clone(v)})
		s.seqs = append(s.seqs, seq)
		s.bytes += len(group) + len(k) + len(v) + 64
		if s.bytes <= s.spillBytes {
			return nil
		}
		return s.spill()
	}
	return s.put(group, seq, k, v)
}

// spill opens the scratch store and moves the rows in memory to it.
func (s *RowSpill) spill() error {
	store, err := s.open(s.purpose)
	if err != nil {
		return err
	}
	s.store, s.batch = store, store.NewBatch()
	rows, seqs := s.rows, s.seqs
	s.rows, s.seqs, s.bytes = nil, nil, 0
	for i, r := range rows {
		if err := s.put([]byte(r.Group), seqs[i], r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

// put adds a row to the scratch store under group ‖ 0x00 ‖ seq ‖ k: groups
// hold no 0x00, so byte order is (group, seq) order, and k keeps two rows
// that name the same seq (a damaged index may hold them) apart.
func (s *RowSpill) put(group []byte, seq uint64, k, v []byte) error {
	s.key = append(append(s.key[:0], group...), 0)
	s.key = append(binary.BigEndian.AppendUint64(s.key, seq), k...)
	_ = s.batch.Set(s.key, v, nil)
	if s.batch.Len() < 4<<20 {
		return nil
	}
	return s.flush()
}

func (s *RowSpill) flush() error {
	if err := s.batch.Commit(pebble.NoSync); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write the %s store", s.purpose)
	}
	s.batch.Reset()
	return nil
}

// Each calls fn with every row in (group, seq) order until fn returns
// false.
func (s *RowSpill) Each(fn func(r Row) bool) error {
	if s.store == nil {
		sort.Sort(rowsInOrder{s.rows, s.seqs})
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
		r := Row{Group: string(k[:i]), Key: slices.Clone(k[i+1+8:]), Value: slices.Clone(it.Value())}
		if !fn(r) {
			return nil
		}
	}
	if err := it.Error(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "read the %s store", s.purpose)
	}
	return nil
}

// Close drops the rows and removes the scratch store, if any. A nil
// RowSpill may be closed.
func (s *RowSpill) Close() {
	if s == nil {
		return
	}
	if s.batch != nil {
		_ = s.batch.Close()
		s.batch = nil
	}
	if s.store != nil {
		s.store.Close()
		s.store = nil
	}
	s.rows, s.seqs = nil, nil
}

// rowsInOrder sorts rows by group and seq (seqs[i] is rows[i]'s), in
// place: a copy of up to the spill bound of rows would double them.
type rowsInOrder struct {
	rows []Row
	seqs []uint64
}

func (o rowsInOrder) Len() int { return len(o.rows) }
func (o rowsInOrder) Less(i, j int) bool {
	if c := strings.Compare(o.rows[i].Group, o.rows[j].Group); c != 0 {
		return c < 0
	}
	return o.seqs[i] < o.seqs[j]
}
func (o rowsInOrder) Swap(i, j int) {
	o.rows[i], o.rows[j] = o.rows[j], o.rows[i]
	o.seqs[i], o.seqs[j] = o.seqs[j], o.seqs[i]
}
