package outbox

import "container/heap"

// item is an entry in a time-ordered heap of the entries changed since the
// last flush: pending ones by next_attempt_at, inflight ones by lease expiry.
// It stands for the entry's state at record seq; once the entry has moved
// on, the item is stale and dropped when met.
type item struct {
	at     int64
	enqSeq uint64
	id     string
	seq    uint64
}

func itemLess(a, b *item) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.enqSeq != b.enqSeq {
		return a.enqSeq < b.enqSeq
	}
	return a.id < b.id
}

type itemHeap []item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return itemLess(&h[i], &h[j]) }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(item)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func (h *itemHeap) push(it item) { heap.Push(h, it) }
func (h *itemHeap) pop() item    { return heap.Pop(h).(item) }
func (h itemHeap) top() *item    { return &h[0] }
