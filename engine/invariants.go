package engine

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// Invariant checks (internal/invariants: on under -race and the invariants
// build tag). Each re-derives what the commit pipeline just built from the
// bytes it built it into, so a bug in the pipeline panics in the test that
// hit it instead of surfacing later as a chain that does not verify.

// checkBuiltGroup runs in the leader once g's journal block is framed and
// before the anchors' heads move on. Decoded, the block must hold exactly
// the group's records; each frame must hash to its stored hash, be byte for
// byte the frame in the anchor's segment bytes at the block's (segno,
// offset), and continue its anchor's chain from the head the group started
// from: next seq, linked prev_hash, a higher counter.
func (db *DB) checkBuiltGroup(g *group) {
	if g.err != nil || g.records == 0 {
		return
	}
	type tip struct {
		seq     uint64
		hash    segment.Hash
		counter uint64
	}
	tips := make(map[string]*tip)
	pending := make(map[string]*pendingAnchor, len(g.order))
	for _, p := range g.order {
		pending[p.a.id] = p
		tips[p.a.id] = &tip{seq: p.a.head, hash: p.a.headHash, counter: p.a.lastCounter}
	}
	n := 0
	err := schema.DecodeJournalBlock(g.block[journal.HeaderSize:], func(r schema.JournalRecord) error {
		n++
		p, t := pending[r.Anchor], tips[r.Anchor]
		if p == nil {
			return fmt.Errorf("record of anchor %q, which the group did not touch", r.Anchor)
		}
		switch {
		case r.Rec.Seq != t.seq+1:
			return fmt.Errorf("anchor %q: seq %d after %d", r.Anchor, r.Rec.Seq, t.seq)
		case r.Rec.PrevHash != t.hash:
			return fmt.Errorf("anchor %q seq %d: prev_hash does not link", r.Anchor, r.Rec.Seq)
		case r.Rec.Counter <= t.counter:
			return fmt.Errorf("anchor %q seq %d: counter %d not above %d", r.Anchor, r.Rec.Seq, r.Rec.Counter, t.counter)
		}
		t.seq, t.hash, t.counter = r.Rec.Seq, r.Rec.Hash, r.Rec.Counter
		if !segmentBytesHold(p, r.Segno, r.Offset, r.Frame) {
			return fmt.Errorf("anchor %q seq %d: the frame at segment %d offset %d is not the journal's", r.Anchor, r.Rec.Seq, r.Segno, r.Offset)
		}
		return nil
	})
	if err == nil && n != g.records {
		err = fmt.Errorf("the block holds %s, the group %d", plural(n, "record"), g.records)
	}
	if err == nil {
		for id, t := range tips {
			p := pending[id]
			if t.seq != p.head || t.hash != p.headHash || t.counter != p.lastCounter {
				err = fmt.Errorf("anchor %q: the group's head is seq %d, its block ends at seq %d", id, p.head, t.seq)
				break
			}
		}
	}
	if err != nil {
		panic(fmt.Sprintf("anchordb invariant: commit group %d: %v", g.id, err))
	}
}

// segmentBytesHold reports whether p's segment writes hold frame at (segno,
// offset).
func segmentBytesHold(p *pendingAnchor, segno uint64, offset int64, frame []byte) bool {
	for _, w := range p.writes {
		if w.segno != segno || offset < w.offset || offset+int64(len(frame)) > w.offset+int64(len(w.buf)) {
			continue
		}
		at := offset - w.offset
		return bytes.Equal(w.buf[at:at+int64(len(frame))], frame)
	}
	return false
}

// checkAppliedGroups runs in the applier after a round is applied and
// published: groups are applied in journal order, each anchor's Merkle
// range has one leaf per record, and the index's row for the head each
// anchor has after the round, the head a reader now sees, names its hash.
func (db *DB) checkAppliedGroups(groups []*group) {
	for _, g := range groups {
		if g.err != nil {
			continue
		}
		if g.id <= db.invariantLastApplied {
			panic(fmt.Sprintf("anchordb invariant: group %d applied after group %d", g.id, db.invariantLastApplied))
		}
		db.invariantLastApplied = g.id
		for _, p := range g.order {
			if p.tree != nil && p.tree.End() != p.head {
				panic(fmt.Sprintf("anchordb invariant: anchor %q: Merkle range of %d leaves at head seq %d", p.a.id, p.tree.End(), p.head))
			}
		}
	}
	// The head each anchor has after the round: one index read per anchor,
	// not one per anchor per group, to keep the race build's tests fast.
	heads := make(map[*anchor]*pendingAnchor)
	var order []*anchor
	for _, g := range groups {
		if g.err != nil {
			continue
		}
		for _, p := range g.order {
			if _, seen := heads[p.a]; !seen {
				order = append(order, p.a)
			}
			heads[p.a] = p
		}
	}
	for _, a := range order {
		p := heads[a]
		if p.head == 0 {
			continue
		}
		v, closer, err := db.index.Get(schema.SeqKey(a.id, p.head))
		if errors.Is(err, pebble.ErrNotFound) {
			panic(fmt.Sprintf("anchordb invariant: anchor %q: no index row for its head seq %d", a.id, p.head))
		}
		if err != nil {
			continue // an I/O failure is the engine's to report, not an invariant
		}
		e, derr := schema.DecodeLocation(v)
		_ = closer.Close()
		if derr != nil || e.Hash != p.headHash {
			panic(fmt.Sprintf("anchordb invariant: anchor %q: the index row of head seq %d does not name its hash (%v)", a.id, p.head, derr))
		}
	}
}
