package engine

import (
	"sync"
)

// Group commit.
//
// Appends are committed by a leader: the first caller to find no commit in
// progress becomes the leader and commits everything queued — its own request
// and any that arrived — as one group: one segment write per anchor touched,
// one Pebble batch, one fsync shared by all. While the leader works, new
// requests queue up behind it. When the leader has applied its group to the
// index it hands leadership to the oldest queued request and only then waits
// for its group's fsync, so the next group is prepared and written while the
// previous one syncs (Pebble's ApplyNoSyncWait keeps the WAL in order and
// folds consecutive syncs into one).
//
// A single writer never switches goroutines: it leads its own group of one.
// 1,000 anchors written by 64 goroutines cost one fsync per group, not one
// per anchor (SPEC §3).

type committer struct {
	mu      sync.Mutex
	queue   []*request
	leading bool
}

// request is one caller's append (one or more records, atomic together) or a
// settle mark.
type request struct {
	entries  []Entry
	sync     bool
	receipts []Receipt
	err      error
	bytes    int64 // admitted bytes, released on completion

	// settle marks are processed by the leader after its group's segment
	// writes: they capture what the settler must fsync.
	settle *settleMark

	wake chan struct{} // buffered(1): leadership handed over, or done
	lead bool          // set before wake when the request must lead
	done bool          // completed (receipts or err are final)
}

var requestPool = sync.Pool{New: func() any { return &request{wake: make(chan struct{}, 1)} }}

func newRequest() *request {
	r := requestPool.Get().(*request)
	r.entries, r.receipts, r.err, r.settle = nil, nil, nil, nil
	r.sync, r.lead, r.done, r.bytes = false, false, false, 0
	return r
}

func freeRequest(r *request) {
	r.entries, r.receipts, r.settle = nil, nil, nil
	requestPool.Put(r)
}

// submit runs req through group commit and returns when it is complete.
func (db *DB) submit(req *request) {
	c := &db.commit
	c.mu.Lock()
	c.queue = append(c.queue, req)
	if c.leading {
		c.mu.Unlock()
		<-req.wake
		if !req.lead {
			return // a leader completed it
		}
		// Leadership was handed to us; the queue is ours to commit.
	} else {
		c.leading = true
		c.mu.Unlock()
	}
	db.lead(req)
}

// lead commits queued groups until the queue is empty or another request
// takes over, then returns. The caller's own request is in the first group.
func (db *DB) lead(self *request) {
	c := &db.commit
	c.mu.Lock()
	group := c.queue
	c.queue = make([]*request, 0, len(group))
	c.mu.Unlock()

	wait := db.commitGroup(group)

	// Hand leadership to the oldest queued request, if any, before waiting
	// for our fsync: its group overlaps with our sync.
	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		c.leading = false
	}
	c.mu.Unlock()

	err := wait()
	for _, r := range group {
		if err != nil && r.err == nil {
			r.err = err
			r.receipts = nil
		}
		r.done = true
		if r != self {
			r.wake <- struct{}{}
		}
	}
}
