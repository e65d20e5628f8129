package engine

import (
	"bytes"
	"slices"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
)

// The checks of an anchor that run after its pass over the segments.

// missingRecords reports index rows left over after the pass: records the
// index has and the segments do not.
func (c *anchorCheck) missingRecords() {
	first, n := uint64(0), uint64(0)
	var at schema.Location
	for {
		seq, _, ok := c.rows.current()
		if !ok {
			break
		}
		row, _ := c.rows.take(seq) // NB: a copy; the iterator's bytes move on
		e, err := schema.DecodeLocation(row)
		if err != nil {
			c.report(errs.CodeIndexMismatch, seq, "", 0, "'s' row of seq %d is malformed: %s", seq, errs.Message(err))
			continue
		}
		if n == 0 {
			first, at = seq, e
		}
		n++
		c.useRow(seq, e)
	}
	if n > 0 {
		c.report(errs.CodeChainBroken, first, c.segPath(at.Segno), at.Offset, "%d records from seq %d are in the index but not in the segments", n, first)
	}
}

// checkTail decides about what follows the snapshot's rows.
func (c *anchorCheck) checkTail() {
	if c.tailAt == nil {
		return
	}
	db := c.v.db
	// NB: in this order — once no append is in flight, the published head
	// covers every frame written before, so frames past it are no append's.
	if c.a == nil || db.appendsInFlight() {
		return
	}
	live := c.a.view().head.head
	t := c.tailAt
	if t.err == nil {
		if last := t.seq + c.tailN - 1; last > live {
			from := max(t.seq, live+1)
			c.report(errs.CodeIndexMismatch, from, t.path, t.offset, "the segments hold records %d..%d past the index's last (seq %d)", from, last, live)
		}
		return
	}
	if t.seq > live {
		code := t.err.Code
		if t.err.Kind == segment.Torn || code == "" {
			code = errs.CodeChainBroken
		}
		c.report(code, t.seq, t.path, t.offset, "after the last record: %s", t.err.Msg)
	}
}

// checkHead compares the published head and tree with the chain.
func (c *anchorCheck) checkHead() {
	if !c.hasView {
		return
	}
	n := c.view.head.head
	if n > c.last {
		c.report(errs.CodeIndexMismatch, c.last+1, "", 0, "the anchor's head is seq %d, the index has rows up to %d", n, c.last)
		return
	}
	// NB: rows past the captured head are a commit not yet published,
	// unless nothing is in flight and the head still has not reached them.
	if c.last > n && c.a != nil && !c.v.db.appendsInFlight() && c.a.view().head.head < c.last {
		c.report(errs.CodeIndexMismatch, n+1, "", 0, "the index has rows up to seq %d, past the anchor's head (seq %d)", c.last, n)
	}
	got, ok := c.roots[n]
	if !ok || n < c.start-1 {
		return
	}
	if want := c.view.root(); got != want || c.view.tree.End() != n {
		c.report(errs.CodeIndexMismatch, n, "", 0, "the in-memory Merkle tree (size %d, root %s) differs from the chain's tree at size %d (root %s)",
			c.view.tree.End(), want, n, got)
	}
}

// checkNodes compares the recomputed stored-level nodes with the 'n' rows.
func (c *anchorCheck) checkNodes() error {
	if !c.treeOK || c.v.halted() {
		return nil
	}
	slices.SortFunc(c.nodes, func(a, b storedNode) int {
		if a.level != b.level {
			return int(a.level) - int(b.level)
		}
		switch {
		case a.index < b.index:
			return -1
		case a.index > b.index:
			return 1
		}
		return 0
	})
	prefix := schema.AnchorPrefix(schema.TagNode, c.id)
	it, err := c.v.snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: schema.PrefixEnd(prefix)})
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	defer it.Close()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		level, index, good := schema.ParseNodeKey(len(prefix), k)
		if !good {
			c.report(errs.CodeIndexMismatch, 0, "", 0, "malformed 'n' row key %x", k)
			continue
		}
		if c.start > 1 && (index+1)<<level < c.start {
			continue // completed before the trusted size: not re-derived
		}
		for i < len(c.nodes) && (c.nodes[i].level < level || c.nodes[i].level == level && c.nodes[i].index < index) {
			n := c.nodes[i]
			c.report(errs.CodeIndexMismatch, nodeSeq(n.level, n.index), "", 0, "no 'n' row for tree node level %d index %d", n.level, n.index)
			i++
		}
		if i < len(c.nodes) && c.nodes[i].level == level && c.nodes[i].index == index {
			if !bytes.Equal(it.Value(), c.nodes[i].hash[:]) {
				c.report(errs.CodeIndexMismatch, nodeSeq(level, index), "", 0, "'n' row of tree node level %d index %d is %x; the chain gives %s", level, index, it.Value(), c.nodes[i].hash)
			}
			i++
			continue
		}
		c.report(errs.CodeIndexMismatch, nodeSeq(level, index), "", 0, "'n' row for tree node level %d index %d, which the chain does not complete", level, index)
	}
	for ; i < len(c.nodes); i++ {
		n := c.nodes[i]
		c.report(errs.CodeIndexMismatch, nodeSeq(n.level, n.index), "", 0, "no 'n' row for tree node level %d index %d", n.level, n.index)
	}
	if err := it.Error(); err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "index iterator")
	}
	return nil
}

// nodeSeq is the seq of the record that completes a tree node.
func nodeSeq(level uint8, index uint64) uint64 { return (index + 1) << level }

// checkMeta compares the 'a' row with the segments, when the pass found the
// anchor sound and nothing is in flight (a seal moves the active segment).
func (c *anchorCheck) checkMeta() {
	if c.findings > 0 || c.newest.segno == 0 || !c.hasMeta || c.start > 1 || c.v.db.appendsInFlight() || c.tailAt != nil {
		return
	}
	wantSeg, wantFirst := c.newest.segno, c.newest.header.FirstSeq
	if c.sealed {
		wantSeg, wantFirst = c.newest.segno+1, c.next
	}
	if c.meta.ActiveSegno != wantSeg || c.meta.ActiveFirstSeq != wantFirst {
		c.report(errs.CodeIndexMismatch, 0, c.newest.path, 0, "the 'a' row names active segment %d from seq %d; the segments say %d from seq %d",
			c.meta.ActiveSegno, c.meta.ActiveFirstSeq, wantSeg, wantFirst)
	}
}
