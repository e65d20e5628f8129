package outbox

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncCrashFS is a crashable MemFS that can take its crash clone at the
// k-th sync from the moment it is armed, just before it or just after it:
// what a machine that lost power there would find on its disk (everything
// synced up to there, nothing else). Every sync of a file or directory counts — the
// journal's, a settle's, the index's — so a clone taken at a random one
// is a crash at a random point of whatever the database was doing.
type syncCrashFS struct {
	vfs.FS
	mem *vfs.MemFS

	mu     sync.Mutex
	left   int  // syncs until the clone; 0: not armed
	before bool // the clone is taken before the sync, not after it
	clone  *vfs.MemFS
	// crashed is set just before the armed clone is taken: an operation
	// that returned before it is in the clone.
	crashed atomic.Bool
}

func newSyncCrashFS(mem *vfs.MemFS) *syncCrashFS { return &syncCrashFS{FS: mem, mem: mem} }

// arm makes the k-th sync from now (k >= 1) take the clone, before it
// syncs or after.
func (s *syncCrashFS) arm(k int, before bool) {
	s.mu.Lock()
	s.left, s.before, s.clone = k, before, nil
	s.mu.Unlock()
}

// take returns the clone armed for, or, if fewer syncs came, a clone of
// the disk now; and disarms.
func (s *syncCrashFS) take() *vfs.MemFS {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clone
	if c == nil {
		c = s.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	}
	s.left, s.clone = 0, nil
	return c
}

// synced counts a sync: called before it (before) and after it (!before).
func (s *syncCrashFS) synced(before bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left == 0 || s.before != before {
		return
	}
	s.left--
	if s.left == 0 {
		s.crashed.Store(true)
		s.clone = s.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	}
}

type syncCrashFile struct {
	vfs.File
	fs *syncCrashFS
}

func (f syncCrashFile) Sync() error {
	f.fs.synced(true)
	err := f.File.Sync()
	f.fs.synced(false)
	return err
}

func (f syncCrashFile) SyncData() error {
	f.fs.synced(true)
	err := f.File.SyncData()
	f.fs.synced(false)
	return err
}

func (f syncCrashFile) SyncTo(length int64) (bool, error) {
	f.fs.synced(true)
	full, err := f.File.SyncTo(length)
	f.fs.synced(false)
	return full, err
}

func (s *syncCrashFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return syncCrashFile{f, s}, nil
}

func (s *syncCrashFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return s.wrap(s.FS.Create(name, c))
}

func (s *syncCrashFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return s.wrap(s.FS.Open(name, opts...))
}

func (s *syncCrashFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return s.wrap(s.FS.OpenReadWrite(name, c, opts...))
}

func (s *syncCrashFS) OpenDir(name string) (vfs.File, error) { return s.wrap(s.FS.OpenDir(name)) }

func (s *syncCrashFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return s.wrap(s.FS.ReuseForWrite(oldname, newname, c))
}

func (s *syncCrashFS) Unwrap() vfs.FS { return s.FS }

// logReplay is an outbox's state read from its anchor's log alone, as a
// fresh process would: each entry's last record, and what the records
// along the way did.
type logReplay struct {
	last      map[string]*decoded
	completes map[string]int // complete records of each id
	// problems lists what no log of the outbox may hold: an id completed
	// twice, attempts that go down, an enqueue of an id held already.
	problems []string
}

func replayLog(ctx context.Context, db *engine.DB, name string) (*logReplay, error) {
	k := newKeys(name)
	r := &logReplay{last: map[string]*decoded{}, completes: map[string]int{}}
	// Below a truncating compaction's cut the log holds only the copies
	// it kept: an entry's records before a gap may be gone, so its next
	// one is not checked against them.
	unsure := map[string]bool{}
	gap := false
	next := uint64(1)
	for rec, err := range db.Log(ctx, AnchorPrefix+name, 1, 0) {
		if err != nil {
			if isGoneRun(err, AnchorPrefix+name) {
				continue // the record after the run has a seq past next
			}
			if engine.CodeOf(err) == "STATE_003" && next == 1 {
				break // no records yet
			}
			return nil, err
		}
		if rec.Seq != next {
			gap = true
			for id := range r.last {
				unsure[id] = true
			}
		}
		next = rec.Seq + 1
		id, ok := k.parseEntryKey(rec.Key)
		if !ok {
			continue
		}
		if rec.Type != segment.TypePut {
			r.problems = append(r.problems, "a delete of entry "+id)
			continue
		}
		d, err := decodeRecord(name, id, rec.Value, engine.Receipt{Anchor: rec.Anchor, Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash})
		if err != nil {
			return nil, err
		}
		prev := r.last[id]
		switch {
		case unsure[id] || prev == nil && gap && d.prev.state != 0:
			delete(unsure, id) // records before it may be gone
		case prev == nil && d.prev.state != 0:
			r.problems = append(r.problems, "entry "+id+" begins with "+d.op)
		case prev != nil && d.prev.state == 0:
			r.problems = append(r.problems, "entry "+id+" enqueued again")
		case prev != nil && d.entry.Attempts < prev.entry.Attempts:
			r.problems = append(r.problems, "attempts of "+id+" went down")
		case prev != nil && prev.entry.State != d.prev.state:
			r.problems = append(r.problems, "entry "+id+": "+d.op+" from "+d.prev.state.String()+" but it was "+prev.entry.State.String())
		}
		if d.op == opComplete {
			r.completes[id]++
			if r.completes[id] > 1 {
				r.problems = append(r.problems, "entry "+id+" completed twice")
			}
		}
		r.last[id] = d
	}
	return r, nil
}
