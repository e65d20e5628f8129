package outbox

import (
	"context"
	"hash/maphash"
	"math/bits"
)

// idFilter is a Bloom filter of every id the outbox holds, so that the
// duplicate lookup of an id it has never held — nearly every Enqueue —
// need not ask the index. A point lookup of a key the index lacks is a
// Pebble seek through every level (its tables have no Bloom filters), the
// largest cost of an enqueue after its append: with the background flush
// off, 64 concurrent enqueuers ran about 1.4× as fast without it
// (docs/OUTBOX.md §10).
//
// It is in memory only. Open starts it empty and not ready; every record
// the Outbox takes in adds its id, and a background scan of the entry rows
// adds the ids the index held when the scan began; once that scan is done
// the filter is ready, and an id it does not hold is one the outbox has
// never held. Until then (and if the scan fails) every lookup asks the
// index. The scan reads every entry, so it starts only once it pays: when
// the lookups that missed in the index since Open reach a fillPayback-th
// of the entries there are (at once for an outbox of fewer than
// fillPayback entries). It grows by filters of doubling capacity, each of about 16 bits
// an id with 11 probes: a false positive (an index lookup that finds
// nothing) about once in 2,000 lookups per filter.
//
// The Outbox's mu guards it.
type idFilter struct {
	seed  maphash.Seed
	parts []bloomPart
	ready bool
}

type bloomPart struct {
	bits     []uint64
	mask     uint64 // len(bits)*64 - 1: the bit count is a power of two
	n, limit int
}

// fillPayback: the id filter's scan starts once the index lookups that
// found nothing reach 1/fillPayback of the entries. A miss is a seek through
// every level of the index; the scan reads an entry row in a fraction of
// that, so by then it has about paid for itself.
const fillPayback = 16

const (
	filterProbes   = 11
	filterBitsEach = 16
	filterFirstCap = 1 << 14
)

func newIDFilter() *idFilter {
	return &idFilter{seed: maphash.MakeSeed()}
}

func newBloomPart(capacity int) bloomPart {
	nbits := uint64(1) << bits.Len64(uint64(capacity*filterBitsEach-1))
	return bloomPart{bits: make([]uint64, nbits/64), mask: nbits - 1, limit: capacity}
}

func (f *idFilter) hashes(id string) (h1, h2 uint64) {
	h := maphash.String(f.seed, id)
	return h, (h>>32 | h<<32) | 1
}

// add puts id in the filter.
func (f *idFilter) add(id string) {
	if len(f.parts) == 0 || f.parts[len(f.parts)-1].n >= f.parts[len(f.parts)-1].limit {
		c := filterFirstCap
		if len(f.parts) > 0 {
			c = 2 * f.parts[len(f.parts)-1].limit
		}
		f.parts = append(f.parts, newBloomPart(c))
	}
	p := &f.parts[len(f.parts)-1]
	h1, h2 := f.hashes(id)
	for i := uint64(0); i < filterProbes; i++ {
		b := (h1 + i*h2) & p.mask
		p.bits[b/64] |= 1 << (b % 64)
	}
	p.n++
}

// mayHold reports whether id may be in the filter: false means it was
// never added.
func (f *idFilter) mayHold(id string) bool {
	h1, h2 := f.hashes(id)
	for i := range f.parts {
		p := &f.parts[i]
		in := true
		for j := uint64(0); j < filterProbes && in; j++ {
			b := (h1 + j*h2) & p.mask
			in = p.bits[b/64]&(1<<(b%64)) != 0
		}
		if in {
			return true
		}
	}
	return false
}

// absent reports whether the outbox has never held id: the filter is ready
// and does not hold it. o.mu is held (for reading at least).
func (st *state) absent(id string) bool {
	return st.ids.ready && !st.ids.mayHold(id)
}

// fillFilter adds the id of every entry row in the index to the filter and
// then makes it ready. It runs in the background, started after Open's
// load (maybeFill), so that every entry the index does not hold yet is one
// maybeFill starts the filter's scan, once, when the misses warrant it.
// Close makes sure it never starts after.
func (o *Outbox) maybeFill() {
	if o.misses.Load() >= o.fillAfter {
		o.fillOnce.Do(func() { go o.fillFilter(o.bgCtx) })
	}
}

// fillFilter adds the id of every entry row in the index to the filter and
// then makes it ready. It runs in the background, started after Open's
// load (maybeFill), so that every entry the index does not hold yet is one
// the Outbox takes in itself (and adds). It gives up, leaving the filter
// unready, when ctx ends or the scan fails.
func (o *Outbox) fillFilter(ctx context.Context) {
	defer close(o.fillDone)
	const chunk = 4096
	ids := make([]string, 0, chunk)
	put := func() {
		o.mu.Lock()
		for _, id := range ids {
			o.st.ids.add(id)
		}
		o.mu.Unlock()
		ids = ids[:0]
	}
	for v, err := range o.db.ScanRange(ctx, o.k.kind(kindEntry), o.k.kindEnd(kindEntry)) {
		if err != nil {
			if o.opts.Logger != nil && ctx.Err() == nil {
				o.opts.Logger.Errorf("outbox %q: reading its ids (lookups ask the index meanwhile): %v", o.name, err)
			}
			return
		}
		id, ok := o.k.parseEntryKey(v.Key)
		if !ok {
			continue
		}
		ids = append(ids, id)
		if len(ids) == chunk {
			put()
		}
	}
	if ctx.Err() != nil {
		return
	}
	put()
	o.mu.Lock()
	o.st.ids.ready = true
	o.mu.Unlock()
}
