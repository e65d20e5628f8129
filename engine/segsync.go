package engine

// Segment bytes never reach a file ahead of their journal block.
//
// Recovery adopts whole, chain-linked frames it finds in a segment past
// the index's end (reconcile.go). A durable group's frames are written
// only after its journal block is fsynced, so whatever of them a power
// loss leaves, the journal restores the rest. A NoSync group's block is
// only written when the applier buffers its frames; had a buffer write,
// a seal's fsync or a settle's — or the kernel's own writeback — put some
// of its frames on the disk while its journal block was lost, recovery
// would adopt part of an AppendBatch: the records before a seal, or one
// anchor's of a batch over several. So the applier raises stagedUpTo to
// each group's journal end before it buffers the group's frames, and a
// buffer is written to its file only once the journal is durable up to
// there: the journal block, CRC-checked and replayed whole, is the unit
// that survives (TestNoSyncBatchAcrossASealIsAtomicAfterAPowerLoss).
//
// Durable groups are fsynced before they are staged, so for them this is
// two atomic loads and no fsync; NoSync appends pay one journal fdatasync
// per buffer write (every 64 KiB of an anchor, a seal, a settle, a read of
// bytes still buffered) when unsynced blocks are pending.

// raiseStaged records that the group ending at the journal position of g
// is about to have its frames buffered.
func (db *DB) raiseStaged(g *group) {
	db.stagedUpTo.Lock()
	if db.stagedUpTo.pos.Less(g.end) {
		db.stagedUpTo.pos = g.end
	}
	db.stagedUpTo.Unlock()
}

// syncStagedJournal makes the journal durable up to the last group staged:
// every byte a segment buffer holds then has its journal block on disk.
func (db *DB) syncStagedJournal() error {
	w := db.flushJournal.Load()
	if w == nil {
		return nil // recovery: the journal being replayed is on disk
	}
	db.stagedUpTo.Lock()
	upTo := db.stagedUpTo.pos
	db.stagedUpTo.Unlock()
	return w.SyncTo(upTo)
}
