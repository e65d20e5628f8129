package merge

import (
	"context"
	"fmt"
	"iter"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// Source yields the records of one anchor in seq order. Next returns false at
// the end. A record returned by Next may alias buffers of the source; Merge
// hands it to its caller before it calls Next on the same source again, so a
// source may reuse its buffers from one call to the next.
type Source interface {
	Next() (segment.Record, bool, error)
}

// SourceFunc adapts a function to a Source.
type SourceFunc func() (segment.Record, bool, error)

// Next calls f.
func (f SourceFunc) Next() (segment.Record, bool, error) { return f() }

// SliceSource returns a Source over records already in memory, in the order
// given. It does not copy the slice.
func SliceSource(records []segment.Record) Source {
	return &sliceSource{recs: records}
}

type sliceSource struct {
	recs []segment.Record
	i    int
}

func (s *sliceSource) Next() (segment.Record, bool, error) {
	if s.i >= len(s.recs) {
		return segment.Record{}, false, nil
	}
	s.i++
	return s.recs[s.i-1], true, nil
}

// FromSeq turns a push iterator (such as an engine's Log) into a Source. The
// caller must call stop when done with the source, whether or not it was read
// to the end, to release the iterator.
func FromSeq(seq iter.Seq2[segment.Record, error]) (src Source, stop func()) {
	next, stop := iter.Pull2(seq)
	return SourceFunc(func() (segment.Record, bool, error) {
		r, err, ok := next()
		if !ok {
			return segment.Record{}, false, nil
		}
		if err != nil {
			return segment.Record{}, false, err
		}
		return r, true, nil
	}), stop
}

// Positioned is a record with its 1-based position in the merged order.
type Positioned struct {
	Pos    uint64
	Record segment.Record
}

// Option configures Merge.
type Option func(*options)

type options struct {
	from uint64
	base uint64
}

// WithFrom makes Merge yield only the records at global positions >= from
// (1-based; 0 and 1 both mean "from the start"). The records before it are
// still read and checked, then dropped: skipping costs a read of what is
// skipped but no memory.
func WithFrom(from uint64) Option { return func(o *options) { o.from = from } }

// WithBase tells Merge that base records precede, in merged order, the first
// records of the sources: the first record yielded has position base+1. Use it
// when resuming from a cut of the merged order — every source starting just
// after the last record with (counter, anchor) <= the cut's key — so that
// positions stay global. Merge cannot check that the sources start at such a
// cut; the caller vouches for it.
func WithBase(base uint64) Option { return func(o *options) { o.base = base } }

// ctxCheckEvery is how many records Merge yields between checks of its
// context: often enough to stop promptly, rarely enough to cost nothing.
const ctxCheckEvery = 1024

// Merge merges per-anchor sources into the merged order of CONTRACT §1 and yields
// each record with its global position. It holds one head record per source
// in a heap, so its memory is O(len(sources)) and independent of the length
// of the logs.
//
// Merge checks what it reads: each source must hold one anchor (a source
// switching anchors, or two sources of one anchor, is INPUT_001), its seqs
// must be dense (each the previous plus one; the first may be any seq >= 1)
// and its counters strictly increasing (a gap, a repeat or a decrease is
// INT_002, located at the anchor and seq). An error from a source is passed on
// wrapped with the anchor it was reading. After an error Merge yields nothing
// more. The context is checked every 1,024 records; its error is yielded as is.
//
// The sequence is single-use: it consumes the sources. A yielded record is
// valid until the loop body returns (the next record may reuse its source's
// buffers); clone it to keep it.
func Merge(ctx context.Context, sources []Source, opts ...Option) iter.Seq2[Positioned, error] {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return func(yield func(Positioned, error) bool) {
		m := newMerger(sources)
		if err := m.init(); err != nil {
			yield(Positioned{}, err)
			return
		}
		pos := o.base
		for n := 0; len(m.heap) > 0; n++ {
			if n%ctxCheckEvery == 0 {
				if err := ctx.Err(); err != nil {
					yield(Positioned{}, err)
					return
				}
			}
			top := m.heap[0].src
			pos++
			if pos >= o.from {
				if !yield(Positioned{Pos: pos, Record: m.heads[top].rec}, nil) {
					return
				}
			}
			ok, err := m.advance(top)
			if err != nil {
				yield(Positioned{}, err)
				return
			}
			if ok {
				m.heap[0] = heapItem{counter: m.heads[top].rec.Counter, anchor: m.heads[top].rec.Anchor, src: top}
				m.down(0)
			} else {
				m.pop()
			}
		}
	}
}

// heapItem is the merge key of one source's head record. Keeping the key in
// the heap itself, not behind an index, keeps comparisons in cache.
type heapItem struct {
	counter uint64
	anchor  string
	src     int
}

func (a heapItem) less(b heapItem) bool {
	if a.counter != b.counter {
		return a.counter < b.counter
	}
	return a.anchor < b.anchor
}

// head is a source's current record and what it must be followed by.
type head struct {
	rec    segment.Record
	anchor string
	seen   bool // a record has been read: seq/counter below are set
}

type merger struct {
	sources []Source
	heads   []head
	heap    []heapItem
}

func newMerger(sources []Source) *merger {
	return &merger{
		sources: sources,
		heads:   make([]head, len(sources)),
		heap:    make([]heapItem, 0, len(sources)),
	}
}

// init reads the first record of every source and builds the heap.
func (m *merger) init() error {
	owner := make(map[string]int, len(m.sources))
	for i := range m.sources {
		ok, err := m.advance(i)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		a := m.heads[i].anchor
		if j, dup := owner[a]; dup {
			return errs.New(errs.CodeInvalidInput, "merge: sources %d and %d both hold anchor %q", j, i, a)
		}
		owner[a] = i
		m.heap = append(m.heap, heapItem{counter: m.heads[i].rec.Counter, anchor: a, src: i})
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return nil
}

// advance reads the next record of source i into its head and checks it
// against the one before.
func (m *merger) advance(i int) (bool, error) {
	h := &m.heads[i]
	rec, ok, err := m.sources[i].Next()
	if err != nil {
		if h.seen {
			return false, fmt.Errorf("merge: reading anchor %q after seq %d: %w", h.anchor, h.rec.Seq, err)
		}
		return false, fmt.Errorf("merge: reading source %d: %w", i, err)
	}
	if !ok {
		return false, nil
	}
	if !h.seen {
		if err := segment.ValidateAnchorID(rec.Anchor); err != nil {
			return false, fmt.Errorf("merge: source %d: %w", i, err)
		}
		if rec.Seq == 0 {
			return false, errs.New(errs.CodeChainBroken, "merge: anchor %q: record with seq 0 (seqs start at 1)", rec.Anchor).At(rec.Anchor, 0, "", 0)
		}
		h.rec, h.anchor, h.seen = rec, rec.Anchor, true
		return true, nil
	}
	prev := &h.rec
	switch {
	case rec.Anchor != h.anchor:
		return false, errs.New(errs.CodeInvalidInput, "merge: source %d of anchor %q yielded a record of anchor %q", i, h.anchor, rec.Anchor)
	case rec.Seq != prev.Seq+1:
		return false, errs.New(errs.CodeChainBroken, "merge: anchor %q: seq %d follows seq %d (seqs must be dense)",
			h.anchor, rec.Seq, prev.Seq).At(h.anchor, prev.Seq+1, "", 0)
	case rec.Counter <= prev.Counter:
		return false, errs.New(errs.CodeChainBroken, "merge: anchor %q: seq %d has counter %d, not above counter %d of seq %d",
			h.anchor, rec.Seq, rec.Counter, prev.Counter, prev.Seq).At(h.anchor, rec.Seq, "", 0)
	}
	h.rec = rec
	return true, nil
}

// down restores the heap property below index i.
func (m *merger) down(i int) {
	h := m.heap
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			c = r
		}
		if !h[c].less(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// pop removes the heap's top.
func (m *merger) pop() {
	n := len(m.heap) - 1
	m.heap[0] = m.heap[n]
	m.heap[n] = heapItem{}
	m.heap = m.heap[:n]
	if n > 0 {
		m.down(0)
	}
}
