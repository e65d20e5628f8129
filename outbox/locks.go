package outbox

import (
	"hash/maphash"
	"sort"
	"sync"
)

// idLocks are per-id mutexes: the read-check-append of one entry holds its
// id's lock, and nothing else does, so operations on different ids never
// wait for each other's fsyncs. A lock exists while someone holds or waits
// for it.
type idLocks struct {
	shards [64]lockShard
	seed   maphash.Seed
}

type lockShard struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

func newIDLocks() *idLocks {
	l := &idLocks{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*idLock)
	}
	return l
}

func (l *idLocks) shard(id string) *lockShard {
	return &l.shards[maphash.String(l.seed, id)%uint64(len(l.shards))]
}

func (l *idLocks) lock(id string) {
	s := l.shard(id)
	s.mu.Lock()
	il := s.m[id]
	if il == nil {
		il = &idLock{}
		s.m[id] = il
	}
	il.refs++
	s.mu.Unlock()
	il.mu.Lock()
}

func (l *idLocks) unlock(id string) {
	s := l.shard(id)
	s.mu.Lock()
	il := s.m[id]
	il.refs--
	if il.refs == 0 {
		delete(s.m, id)
	}
	s.mu.Unlock()
	il.mu.Unlock()
}

// lockAll locks ids in byte order (so that two holders of several never
// wait for each other) and returns them deduplicated, in that order.
func (l *idLocks) lockAll(ids []string) []string {
	s := append([]string(nil), ids...)
	sort.Strings(s)
	out := s[:0]
	for i, id := range s {
		if i > 0 && id == s[i-1] {
			continue
		}
		out = append(out, id)
	}
	for _, id := range out {
		l.lock(id)
	}
	return out
}

func (l *idLocks) unlockAll(ids []string) {
	for _, id := range ids {
		l.unlock(id)
	}
}
