package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/transparency-dev/merkle/compact"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// The reads a read-only open serves from the files alone (filelog.go),
// when it cannot use the index: Log, Record and the proofs. Each reads the
// journal, then walks the anchor's files; what it answers is the anchor's
// log as far as its consistent prefix reaches.

// walkFiles reads the journal and walks anchor's files with visit. A
// finding (damage) ends the walk's prefix; it is returned as the error
// when the walk did not stop before it (so a read below damage works).
// An anchor the files hold no record of is STATE_003.
func (db *DB) walkFiles(ctx context.Context, anchor string, visit func(fileEntry) error) (*fileWalk, error) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	jv, err := db.readJournal(ctx, anchor)
	if err != nil {
		return nil, err
	}
	w := db.newFileWalk(anchor, jv)
	var damage *errs.Error
	stopped := false
	w.finding = func(f Finding) {
		if damage == nil {
			damage = f.Err()
		}
	}
	w.visit = func(e fileEntry) error {
		err := visit(e)
		if err == errStopWalk {
			stopped = true
		}
		return err
	}
	if err := w.run(ctx); err != nil {
		return w, err
	}
	if damage != nil && !stopped {
		return w, damage
	}
	if w.size == 0 && damage == nil {
		return w, errs.New(errs.CodeDependencyMissing, "anchor %q is not in the database's files", anchor).At(anchor, 0, "", 0)
	}
	return w, nil
}

// fileLog is Log from the files: the same records, kept copies of removed
// ones included, and one STATE_003 per run of removed records.
func (db *DB) fileLog(ctx context.Context, anchor string, from, to uint64, yield func(segment.Record, error) bool) {
	if err := db.beginFiles(); err != nil {
		yield(segment.Record{}, err)
		return
	}
	defer db.endRead()
	from = max(from, 1)
	if to != 0 && to < from {
		return
	}
	var gone []uint64 // the run of removed seqs not yet reported: first, last
	heldFrom := uint64(0)
	report := func() bool {
		if gone == nil {
			return true
		}
		e := goneRunError(anchor, gone[0], gone[1], heldFrom)
		gone = nil
		return yield(segment.Record{}, e)
	}
	stopped := false
	_, err := db.walkFiles(ctx, anchor, func(e fileEntry) error {
		if e.stub {
			heldFrom = e.seq + 1
		}
		if e.seq < from {
			return nil
		}
		if to != 0 && e.seq > to {
			return errStopWalk
		}
		if e.rec == nil {
			if gone == nil {
				gone = []uint64{e.seq, e.seq}
			}
			gone[1] = e.seq
			return nil
		}
		if !report() || !yield(*e.rec, nil) {
			stopped = true
			return errStopWalk
		}
		return nil
	})
	if stopped {
		return
	}
	if !report() {
		return
	}
	if err != nil {
		yield(segment.Record{}, err)
	}
}

// goneRunError is the STATE_003 of records from..to of anchor, which a
// compaction removed without keeping a copy.
func goneRunError(anchor string, from, to, heldFrom uint64) *errs.Error {
	run := fmt.Sprintf("record %d", from)
	if to > from {
		run = fmt.Sprintf("records %d..%d", from, to)
	}
	held := ""
	if heldFrom > to {
		held = fmt.Sprintf("; the log is held whole from seq %d", heldFrom)
	}
	return errs.New(errs.CodeDependencyMissing, "%s of anchor %q were removed by a compaction, which keeps of a removed segment only each key's last record%s",
		run, anchor, held).At(anchor, from, "", 0)
}

// fileRecord is Record from the files.
func (db *DB) fileRecord(ctx context.Context, anchor string, seq uint64) (segment.Record, error) {
	if err := db.beginFiles(); err != nil {
		return segment.Record{}, err
	}
	defer db.endRead()
	var found *fileEntry
	w, err := db.walkFiles(ctx, anchor, func(e fileEntry) error {
		if e.seq == seq {
			found = &e
			return errStopWalk
		}
		return nil
	})
	switch {
	case found != nil && found.rec == nil:
		return segment.Record{}, goneRunError(anchor, seq, seq, 0)
	case found != nil:
		return *found.rec, nil
	case err != nil:
		return segment.Record{}, err
	}
	return segment.Record{}, errs.New(errs.CodeDependencyMissing, "anchor %q has no record %d (its files hold %d)", anchor, seq, w.size).At(anchor, seq, "", 0)
}

// treePass computes, in one pass over an anchor's leaves, the hashes of
// some perfect subtrees (disjoint, as a proof's are) and the tree's roots at
// some sizes. Memory is a compact range, whatever the log's length.
type treePass struct {
	ids   []compact.NodeID // sorted by their first leaf
	sizes []uint64         // sorted
	nodes map[compact.NodeID]segment.Hash
	roots map[uint64]segment.Hash
	leaf  map[uint64]segment.Hash // record hashes wanted, by seq

	whole proof.Stack
	sub   proof.Stack
	cur   int
}

func newTreePass(ids []compact.NodeID, sizes []uint64, seqs ...uint64) *treePass {
	p := &treePass{ids: slices.Clone(ids), sizes: slices.Clone(sizes),
		nodes: map[compact.NodeID]segment.Hash{}, roots: map[uint64]segment.Hash{}, leaf: map[uint64]segment.Hash{}}
	slices.SortFunc(p.ids, func(a, b compact.NodeID) int {
		ab, _ := a.Coverage()
		bb, _ := b.Coverage()
		return cmpUint(ab, bb)
	})
	slices.Sort(p.sizes)
	for _, s := range seqs {
		p.leaf[s] = segment.Hash{}
	}
	p.noteRoot()
	return p
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// add takes record seq's hash, seqs in order from 1.
func (p *treePass) add(seq uint64, hash segment.Hash) {
	if _, ok := p.leaf[seq]; ok {
		p.leaf[seq] = hash
	}
	leaf := segment.LeafHash(hash)
	i := seq - 1
	for p.cur < len(p.ids) {
		begin, end := p.ids[p.cur].Coverage()
		if i < begin {
			break
		}
		if i < end {
			p.sub.Append(leaf, nil)
			if i == end-1 {
				p.nodes[p.ids[p.cur]] = p.sub.Root()
				p.sub = proof.Stack{}
				p.cur++
			}
			break
		}
		p.cur++ // cannot be: a node is fed every leaf it covers
	}
	p.whole.Append(leaf, nil)
	p.noteRoot()
}

func (p *treePass) noteRoot() {
	if _, ok := slices.BinarySearch(p.sizes, p.whole.Size()); ok {
		p.roots[p.whole.Size()] = p.whole.Root()
	}
}

// path returns the hashes of ids, in their order, as nodes.Rehash wants.
func (p *treePass) path(n merkleproof.Nodes) ([]segment.Hash, error) {
	hs := make([][]byte, len(n.IDs))
	for i, id := range n.IDs {
		h, ok := p.nodes[id]
		if !ok {
			return nil, errs.New(errs.CodeDependencyMissing, "tree node %d at level %d is not in the files read", id.Index, id.Level)
		}
		hs[i] = h[:]
	}
	out, err := n.Rehash(hs, segment.Blake3RFC6962.HashChildren)
	if err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "proof path")
	}
	path := make([]segment.Hash, len(out))
	for i, h := range out {
		copy(path[i][:], h)
	}
	return path, nil
}

// fileTree walks anchor's files through the pass made for size records (0:
// as many as the prefix holds, which takes a walk of its own to count, so
// that memory stays a compact range however long the log) and returns the
// size it went to.
func (db *DB) fileTree(ctx context.Context, anchor string, size uint64, pass func(uint64) *treePass) (*treePass, uint64, error) {
	if size == 0 {
		w, err := db.walkFiles(ctx, anchor, func(fileEntry) error { return nil })
		if err != nil {
			return nil, 0, err
		}
		size = w.size
	}
	p := pass(size)
	w, err := db.walkFiles(ctx, anchor, func(e fileEntry) error {
		if e.seq > size {
			return errStopWalk
		}
		p.add(e.seq, e.hash)
		return nil
	})
	if w != nil && w.size >= size {
		return p, size, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return nil, 0, errs.New(errs.CodeDependencyMissing, "anchor %q has %d records in its files: there is no tree of size %d", anchor, w.size, size).At(anchor, size, "", 0)
}

// fileProveInclusion is ProveInclusion from the files.
func (db *DB) fileProveInclusion(ctx context.Context, anchor string, seq, size uint64) (*proof.InclusionProof, error) {
	if err := db.beginFiles(); err != nil {
		return nil, err
	}
	defer db.endRead()
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	if seq == 0 {
		return nil, errs.New(errs.CodeInvalidInput, "seq 0 does not exist (seqs start at 1)").At(anchor, 0, "", 0)
	}
	if size != 0 && seq > size {
		return nil, errs.New(errs.CodeDependencyMissing, "anchor %q: seq %d is not in the tree of size %d", anchor, seq, size).At(anchor, seq, "", 0)
	}
	var nodes merkleproof.Nodes
	p, size, err := db.fileTree(ctx, anchor, size, func(size uint64) *treePass {
		if seq <= size {
			nodes, _ = merkleproof.Inclusion(seq-1, size)
		}
		return newTreePass(nodes.IDs, []uint64{size}, seq)
	})
	if err != nil {
		return nil, err
	}
	if seq > size {
		return nil, errs.New(errs.CodeDependencyMissing, "anchor %q: seq %d is not in the tree of size %d", anchor, seq, size).At(anchor, seq, "", 0)
	}
	path, err := p.path(nodes)
	if err != nil {
		return nil, err
	}
	ip := &proof.InclusionProof{Anchor: anchor, Seq: seq, Size: size, Leaf: p.leaf[seq], Root: p.roots[size], Proof: path}
	if err := proof.VerifyInclusionProof(ip); err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q: the inclusion proof built from the files does not verify", anchor)
	}
	return ip, nil
}

// fileProveConsistency is ProveConsistency from the files.
func (db *DB) fileProveConsistency(ctx context.Context, anchor string, oldSize, newSize uint64) (*proof.ConsistencyProof, error) {
	if err := db.beginFiles(); err != nil {
		return nil, err
	}
	defer db.endRead()
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	if newSize != 0 && oldSize > newSize {
		return nil, errs.New(errs.CodeInvalidInput, "consistency proof from size %d down to %d", oldSize, newSize).At(anchor, 0, "", 0)
	}
	var nodes merkleproof.Nodes
	p, newSize, err := db.fileTree(ctx, anchor, newSize, func(size uint64) *treePass {
		if oldSize <= size {
			nodes, _ = merkleproof.Consistency(oldSize, size)
		}
		return newTreePass(nodes.IDs, []uint64{oldSize, size})
	})
	if err != nil {
		return nil, err
	}
	if oldSize > newSize {
		return nil, errs.New(errs.CodeInvalidInput, "consistency proof from size %d down to %d", oldSize, newSize).At(anchor, 0, "", 0)
	}
	path, err := p.path(nodes)
	if err != nil {
		return nil, err
	}
	cp := &proof.ConsistencyProof{Anchor: anchor, OldSize: oldSize, NewSize: newSize, OldRoot: p.roots[oldSize], NewRoot: p.roots[newSize], Proof: path}
	if err := proof.VerifyConsistencyProof(cp); err != nil {
		return nil, errs.Wrap(errs.CodeIndexMismatch, err, "anchor %q: the consistency proof built from the files does not verify", anchor)
	}
	return cp, nil
}

// fileAnchorRoot is AnchorRoot from the files.
func (db *DB) fileAnchorRoot(ctx context.Context, anchor string, size uint64) (segment.Hash, uint64, error) {
	if err := db.beginFiles(); err != nil {
		return segment.Hash{}, 0, err
	}
	defer db.endRead()
	p, size, err := db.fileTree(ctx, anchor, size, func(size uint64) *treePass {
		return newTreePass(nil, []uint64{size})
	})
	if err != nil {
		return segment.Hash{}, 0, err
	}
	return p.roots[size], size, nil
}
