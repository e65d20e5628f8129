package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// Options configure an Outbox. The zero value is usable.
type Options struct {
	// Policy is the retry policy; the zero Policy means DefaultPolicy().
	Policy Policy
	// Clock gives the time of every schedule and lease. Default time.Now.
	// Tests set it to control lease expiry and retries.
	Clock func() time.Time
	// NoSync makes the outbox's appends return once they reach the OS
	// (engine.WithNoSync); by default they follow the database's mode.
	NoSync bool
	// MaxPayload bounds a payload and a result, in bytes. Default 1 MiB;
	// at most what one record of the database's value limit holds.
	MaxPayload int
	// FlushEntries and FlushInterval say when the index rows of the entries
	// changed since the last flush are written (docs/OUTBOX.md): once that
	// many entries changed, or that long after one did. Defaults 4096 and
	// 1 s; a negative FlushInterval flushes only by count, Flush and Close.
	FlushEntries  int
	FlushInterval time.Duration
	// ReadOnly opens the outbox for reading: every call that would write is
	// refused (IO_001), and Close writes nothing.
	ReadOnly bool
	// Logger receives the errors of background flushes. Default: none.
	Logger engine.Logger
}

// Outbox is one named outbox of a database: a durable queue of promises
// kept as records on the anchor "outbox/NAME". It is safe for concurrent
// use. One Outbox per name and database may be open at a time in a
// process (a second Open is STATE_001), and a database has one writer
// process (CONTRACT §3), so this Outbox is the one writer of its anchor.
//
// How it works, in brief (docs/OUTBOX.md has it in full): every transition
// of an entry is one record, a put of the entry row keyed by its id; the
// index rows that order pending, inflight and dead entries by time are
// written in batches by a flush, and stand at the watermark the flush
// records. In memory the Outbox keeps the entries changed since then, so
// that a claim sees them at once; after a crash they are read back from
// the log past the watermark.
type Outbox struct {
	db        *engine.DB
	name      string
	anchor    string
	k         keys
	opts      Options
	policy    Policy
	policyRef string
	wopts     []engine.WriteOption
	durable   bool
	locks     *idLocks
	// reservation keeps Ingest off the anchor while the Outbox is open: it
	// is the anchor's one writer, and keeps what changed since the last
	// flush in memory.
	reservation *engine.AnchorReservation

	// gate: every call holds it for reading while it runs; Close takes it
	// for writing, so it waits for the calls under way.
	gate   sync.RWMutex
	closed bool

	// claimMu orders the selection of claim candidates (it is not held
	// across an append). flushMu orders flushes.
	claimMu sync.Mutex
	flushMu sync.Mutex

	// mu guards st, the in-memory projection. It is never held across an
	// engine call.
	mu sync.RWMutex
	st state

	notifyCh chan struct{} // a pending entry may have become claimable
	flushReq chan struct{}
	stop     chan struct{}
	bgDone   chan struct{}
	fillDone chan struct{} // the id filter's scan has ended, or will never start
	bgCtx    context.Context
	bgCancel context.CancelFunc
	// The id filter's scan starts once (fillOnce) the lookups that missed
	// in the index reach fillAfter (filter.go).
	fillOnce  sync.Once
	misses    atomic.Int64
	fillAfter int64
}

// state is the Outbox's memory: the entries changed since the last flush
// (and, until the index has applied them, those it flushed), the heaps
// that order them, the counts, and which records of the anchor it has seen.
type state struct {
	hot map[string]*hotEntry
	// ids holds every id the outbox holds once ready (filter.go).
	ids *idFilter
	// dirty holds the entries in memory with records past the mark; clean
	// the others, which a flush forgets once the index has applied them.
	dirty    map[string]*hotEntry
	clean    map[string]*hotEntry
	ready    itemHeap        // pending entries in memory, by next_attempt_at
	leases   itemHeap        // inflight ones, by lease expiry
	dead     itemHeap        // dead ones, by dead_at
	reserved map[string]bool // ids a claim has selected and not finished
	// reservedRows holds the row a reserved id was selected by, if any.
	reservedRows map[string]rowKey

	// from[0] and from[1] are where claims scan the r and l rows from
	// (nil: the kind's first key). Every live row before them is of an
	// entry in hot or reserved: the rows of entries that left a state by
	// claims and transitions stay behind as deleted keys (the engine keeps
	// every version), and scanning them again from the start would cost
	// the outbox's whole history. What can make a row before them live and
	// claimable again rewinds them: a flush, to the rows it leaves for the
	// entries it flushed; a claim that fails, to its candidates' rows. The
	// mark persists them. cursorEpoch counts the rewinds.
	from        [2][]byte
	cursorEpoch uint64

	counts counts // every record seen
	mark   mark   // what the rows stand at

	// seen: every record of the anchor with seq <= contig has been taken
	// into hot and counts; ahead holds the ones after it, with the change
	// each made to the counts, until the gap closes.
	contig uint64
	ahead  map[uint64]delta
	// sinceMark lists the changes to the counts of the records after the
	// mark up to contig, in seq order: a flush at W <= contig records the
	// counts at W.
	sinceMark []seqDelta
	maxSeen   uint64
	// probe is the anchor's head at the last flush's barrier: records up to
	// it that the Outbox has not seen are not its own in flight, and the
	// next flush reads them from the log.
	probe uint64
}

// hotEntry is an entry the Outbox keeps in memory.
type hotEntry struct {
	cur  *Entry // the latest state; never changed once stored
	seq  uint64 // the record that wrote it
	rows rowRef // what its index row says: its state at the mark
	vers []ver  // the row of each record past the mark, oldest first
}

// ver is one record of an entry past the mark: its row, and the record
// itself (its receipt and value), which a flush puts in the row.
type ver struct {
	seq uint64
	row rowRef
	rc  engine.Receipt
	val []byte
}

// rowKey is an index row of kind r or l.
type rowKey struct {
	kind byte
	key  []byte
}

// fromIdx is the index in state.from of the rows of kind.
func fromIdx(kind byte) int {
	if kind == kindReady {
		return 0
	}
	return 1
}

// rewind moves the scan start of kind's rows back to key, if it is past it.
func (st *state) rewind(kind byte, key []byte) {
	i := fromIdx(kind)
	if st.from[i] != nil && bytes.Compare(key, st.from[i]) < 0 {
		st.from[i] = key
		st.cursorEpoch++
	}
}

// scanFrom is where a read of every live row of kind starts: the claims'
// start, or a reserved entry's row before it.
func (st *state) scanFrom(kind byte) []byte {
	f := st.from[fromIdx(kind)]
	for _, r := range st.reservedRows {
		if f != nil && r.kind == kind && bytes.Compare(r.key, f) < 0 {
			f = r.key
		}
	}
	return f
}

type seqDelta struct {
	seq uint64
	d   delta
}

// countsAt returns the counts after the records up to seq w, a seq from the
// mark to contig.
func (st *state) countsAt(w uint64) counts {
	c := st.mark.counts
	for _, sd := range st.sinceMark {
		if sd.seq > w {
			break
		}
		c.apply(sd.d)
	}
	return c
}

// delta is the change a record makes to the counts: from one state to
// another (0: none).
type delta struct{ from, to State }

// counts are entries by state, indexed by State-1.
type counts [numStates]int64

func (c *counts) apply(d delta) {
	if d.from != 0 {
		c[d.from-1]--
	}
	if d.to != 0 {
		c[d.to-1]++
	}
}

// registry holds the open Outboxes, one per database and name.
var registry = struct {
	sync.Mutex
	m map[registryKey]bool
}{m: map[registryKey]bool{}}

type registryKey struct {
	db   *engine.DB
	name string
}

// Open opens the outbox NAME of db, reading back what the log holds past
// the watermark of its index rows (its records after the last flush). An
// outbox with no records is created by its first Enqueue. A second Open of
// the same name on the same database, while the first is open, is
// STATE_001.
func Open(ctx context.Context, db *engine.DB, name string, opts Options) (*Outbox, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if opts.Policy == (Policy{}) {
		opts.Policy = DefaultPolicy()
	}
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	limits := db.Options().Limits
	// A record holds the payload base64'd (4/3) when it is not UTF-8, and
	// up to about 300 KiB of metadata, times and error text.
	maxFit := (limits.MaxValue - 512<<10) / 4 * 3
	if opts.MaxPayload == 0 {
		opts.MaxPayload = min(DefaultMaxPayload, maxFit)
	}
	if opts.MaxPayload < 1 || opts.MaxPayload > maxFit {
		return nil, errs.New(errs.CodeInvalidInput, "outbox MaxPayload %d is out of range (1..%d for the database's value limit of %d)", opts.MaxPayload, maxFit, limits.MaxValue)
	}
	if len(newKeys(name).entry(string(make([]byte, MaxIDBytes)))) > limits.MaxKey {
		return nil, errs.New(errs.CodeInvalidInput, "outbox name %q makes keys over the database's key limit of %d", name, limits.MaxKey)
	}
	if opts.FlushEntries <= 0 {
		opts.FlushEntries = 4096
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = time.Second
	}
	rk := registryKey{db, name}
	registry.Lock()
	if registry.m[rk] {
		registry.Unlock()
		return nil, errs.New(errs.CodeScopeLocked, "outbox %q is already open on this database", name)
	}
	registry.m[rk] = true
	registry.Unlock()

	o := &Outbox{
		db: db, name: name, anchor: AnchorPrefix + name, k: newKeys(name), opts: opts,
		policy: opts.Policy, policyRef: opts.Policy.PolicyRef(), locks: newIDLocks(),
		notifyCh: make(chan struct{}, 1), flushReq: make(chan struct{}, 1),
		stop: make(chan struct{}), bgDone: make(chan struct{}), fillDone: make(chan struct{}),
	}
	o.durable = !db.Options().NoSync && !opts.NoSync
	if opts.NoSync {
		o.wopts = []engine.WriteOption{engine.WithNoSync(true)}
	}
	o.st.hot = map[string]*hotEntry{}
	o.st.ids = newIDFilter()
	o.st.dirty, o.st.clean = map[string]*hotEntry{}, map[string]*hotEntry{}
	o.st.reserved = map[string]bool{}
	o.st.reservedRows = map[string]rowKey{}
	o.st.ahead = map[uint64]delta{}
	res, err := db.ReserveAnchor(o.anchor, fmt.Sprintf("outbox %q", name))
	if err == nil {
		o.reservation = res
		err = o.load(ctx)
	}
	if err != nil {
		if o.reservation != nil {
			o.reservation.Release()
		}
		registry.Lock()
		delete(registry.m, rk)
		registry.Unlock()
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	o.bgCtx, o.bgCancel = bg, cancel
	if opts.ReadOnly {
		close(o.bgDone)
		o.fillOnce.Do(func() { close(o.fillDone) }) // no filter: nothing is enqueued
	} else {
		go o.flusher(bg)
		var n int64
		for _, c := range o.st.counts {
			n += c
		}
		o.fillAfter = n / fillPayback
		o.maybeFill()
	}
	return o, nil
}

// Name returns the outbox's name.
func (o *Outbox) Name() string { return o.name }

// Anchor returns the anchor id that holds the outbox's records.
func (o *Outbox) Anchor() string { return o.anchor }

// Policy returns the retry policy in effect.
func (o *Outbox) Policy() Policy { return o.policy }

// Close stops the background flusher, flushes the index rows (unless the
// outbox is read-only) and releases the name. Calls under way finish
// first; later calls are refused with IO_001. Close the outbox before its
// database.
func (o *Outbox) Close() error {
	o.gate.Lock()
	if o.closed {
		o.gate.Unlock()
		return nil
	}
	o.closed = true
	o.gate.Unlock()
	close(o.stop)
	<-o.bgDone
	o.bgCancel()
	o.fillOnce.Do(func() { close(o.fillDone) }) // if it never started
	<-o.fillDone
	var err error
	if !o.opts.ReadOnly {
		err = o.flush(context.Background())
	}
	o.reservation.Release()
	registry.Lock()
	delete(registry.m, registryKey{o.db, o.name})
	registry.Unlock()
	return err
}

// enter begins a call; the caller must leave. A write is refused on a
// read-only outbox.
func (o *Outbox) enter(write bool) error {
	o.gate.RLock()
	if o.closed {
		o.gate.RUnlock()
		return errClosed
	}
	if write && o.opts.ReadOnly {
		o.gate.RUnlock()
		return errs.New(errs.CodeWriteFailed, "outbox %q is open read-only", o.name)
	}
	return nil
}

func (o *Outbox) leave() { o.gate.RUnlock() }

func (o *Outbox) now() time.Time { return o.opts.Clock() }

// see records that the record seq was taken in, with its change to the
// counts. It reports false for a record seen before (a record can arrive
// twice: from its own append and from a read of the log).
func (st *state) see(seq uint64, d delta) bool {
	if seq <= st.contig {
		return false
	}
	if _, dup := st.ahead[seq]; dup {
		return false
	}
	st.ahead[seq] = d
	st.counts.apply(d)
	st.maxSeen = max(st.maxSeen, seq)
	for {
		d, ok := st.ahead[st.contig+1]
		if !ok {
			break
		}
		delete(st.ahead, st.contig+1)
		st.contig++
		if d != (delta{}) {
			st.sinceMark = append(st.sinceMark, seqDelta{st.contig, d})
		}
	}
	return true
}

// apply takes in the record with receipt rc and value val, which moved
// entry id from the state whose row is prev to e.
func (st *state) apply(id string, rc engine.Receipt, val []byte, e *Entry, prev rowRef) {
	seq := rc.Seq
	h := st.hot[id]
	if h == nil {
		// An entry not in memory has the rows of its state at the mark,
		// which is the state this record moved it from.
		h = &hotEntry{rows: prev}
		st.hot[id] = h
		st.ids.add(id)
	}
	if seq <= h.seq {
		return
	}
	if len(h.vers) == 0 {
		st.dirty[id] = h
		delete(st.clean, id)
	}
	h.vers = append(h.vers, ver{seq: seq, row: e.rowRef(), rc: rc, val: val})
	h.cur, h.seq = e, seq
	st.pushItem(id, h)
}

func (st *state) pushItem(id string, h *hotEntry) {
	// The heaps keep stale items until they come to the top: rebuild them
	// from what is in memory when they hold more than twice that.
	if n := len(st.ready) + len(st.leases) + len(st.dead); n > 2*len(st.hot)+1024 {
		st.ready, st.leases, st.dead = st.ready[:0], st.leases[:0], st.dead[:0]
		for id, h := range st.hot {
			st.pushOne(id, h)
		}
	}
	st.pushOne(id, h)
}

func (st *state) pushOne(id string, h *hotEntry) {
	e := h.cur
	switch e.State {
	case StatePending:
		st.ready.push(item{at: e.NextAttemptAt.UnixNano(), enqSeq: e.EnqueueSeq, id: id, seq: h.seq})
	case StateInflight:
		st.leases.push(item{at: e.Lease.ExpiresAt.UnixNano(), enqSeq: e.EnqueueSeq, id: id, seq: h.seq})
	case StateDead:
		st.dead.push(item{at: e.DeadAt.UnixNano(), enqSeq: e.EnqueueSeq, id: id, seq: h.seq})
	}
}

// validItem reports whether a heap item still stands for its entry: the
// entry is in memory at the item's record, in state s.
func (st *state) validItem(it *item, s State) bool {
	h := st.hot[it.id]
	return h != nil && h.seq == it.seq && h.cur.State == s
}

// topValid drops the stale items on top of a heap and returns the first
// valid one, or nil.
func (st *state) topValid(h *itemHeap, s State) *item {
	for len(*h) > 0 {
		if it := h.top(); st.validItem(it, s) {
			return it
		}
		h.pop()
	}
	return nil
}

// write is one record to append: entry id moves from prev to e by t.
type write struct {
	id   string
	e    *Entry
	t    transition
	prev *Entry // nil for a new entry
}

// commit appends the records of ws in one atomic batch and takes them into
// memory, putting the record's seq where the entry refers to it. The
// caller holds the locks of every id.
func (o *Outbox) commit(ctx context.Context, ws []write) error {
	entries := make([]engine.Entry, len(ws))
	for i := range ws {
		w := &ws[i]
		w.t.prev = w.prev
		entries[i] = engine.Entry{Anchor: o.anchor, Type: segment.TypePut, Key: o.k.entry(w.id), Value: encodeRecord(w.e, w.t)}
	}
	rs, err := o.db.AppendBatch(ctx, entries, o.wopts...)
	if err != nil {
		return err
	}
	wake := false
	o.mu.Lock()
	for i := range ws {
		w := &ws[i]
		r := rs[i]
		e := w.e
		e.Receipt = r
		if e.EnqueueSeq == 0 {
			e.EnqueueSeq = r.Seq
		}
		if e.Lease != nil && e.Lease.Token == 0 {
			e.Lease.Token = r.Seq
		}
		var d delta
		var prevRow rowRef
		if w.prev != nil {
			d.from, prevRow = w.prev.State, w.prev.rowRef()
		}
		d.to = e.State
		if o.st.see(r.Seq, d) {
			o.st.apply(w.id, r, entries[i].Value, e, prevRow)
		}
		wake = wake || e.State == StatePending
	}
	over := len(o.st.dirty) >= o.opts.FlushEntries
	o.mu.Unlock()
	if wake {
		o.wake()
	}
	if over {
		select {
		case o.flushReq <- struct{}{}:
		default:
		}
	}
	return nil
}

// wake tells a waiting Run loop that an entry may be claimable.
func (o *Outbox) wake() {
	select {
	case o.notifyCh <- struct{}{}:
	default:
	}
}

// lookup returns the entry id as it is: from memory when the Outbox changed
// it lately, else from the index, which then holds its last record (the
// Outbox forgets an entry only once a read has waited for the index to
// apply everything acknowledged). The caller holds id's lock, so nothing
// changes it meanwhile. The Entry returned is shared: do not change it.
func (o *Outbox) lookup(ctx context.Context, id string) (*Entry, bool, error) {
	o.mu.RLock()
	if h := o.st.hot[id]; h != nil {
		e := h.cur
		o.mu.RUnlock()
		return e, true, nil
	}
	absent := o.st.absent(id)
	o.mu.RUnlock()
	if absent {
		return nil, false, nil
	}
	v, err := o.db.GetApplied(ctx, o.k.entry(id))
	if errors.Is(err, engine.ErrNotFound) {
		o.misses.Add(1)
		o.maybeFill()
		if v.Deleted {
			return nil, false, errs.New(errs.CodeIndexMismatch, "outbox %q entry %q: its row was deleted (seq %d): an id is never freed", o.name, id, v.Seq)
		}
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	d, err := decodeTrusted(o.name, id, v.Value, v.Receipt)
	if err != nil {
		return nil, false, err
	}
	return &d.entry, true, nil
}

// Durable reports whether the outbox's appends are fsynced before they
// return (the database's mode and Options.NoSync).
func (o *Outbox) Durable() bool { return o.durable }
