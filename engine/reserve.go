package engine

import (
	"maps"
	"slices"
	"sync"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// Anchor reservations: a client that keeps state about an anchor in memory
// — the outbox, which is the one writer of its anchor and keeps every
// change since its last flush in memory — reserves the anchor while it
// runs, so that Ingest does not join records to that anchor behind its
// back. An ingest whose source holds a reserved anchor is refused whole
// (STATE_001, naming the holder) before it joins anything; a reservation
// of an anchor an ingest is joining is refused the same way, as is a
// second reservation of one anchor. Appends are not checked: the holder's
// own appends are the point, and in one process the rest is the
// program's to coordinate.

// reservations are the anchors reserved in a database, each with what
// holds it.
type reservations struct {
	mu sync.Mutex
	m  map[string]string
}

// AnchorReservation is a reserved anchor (ReserveAnchor). Release ends it.
type AnchorReservation struct {
	db     *DB
	anchor string
	once   sync.Once
}

// ReserveAnchor reserves anchor for holder (a name for the refusals, e.g.
// `outbox "billing"`) until the reservation is released: while it holds,
// Ingest refuses a source that carries the anchor (STATE_001). The anchor
// need not exist. An anchor already reserved, or being joined by an
// ingest, is STATE_001; a bad anchor id INPUT_001; a closed database
// IO_001.
func (db *DB) ReserveAnchor(anchor, holder string) (*AnchorReservation, error) {
	if err := segment.ValidateAnchorID(anchor); err != nil {
		return nil, err
	}
	if db.closed.Load() {
		return nil, errClosed
	}
	r := &db.reserved
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.m[anchor]; ok {
		return nil, errs.New(errs.CodeScopeLocked, "anchor %q is reserved by %s", anchor, h)
	}
	if held := db.ingesting.Load(); held != nil && (*held)[anchor] {
		return nil, errs.New(errs.CodeScopeLocked, "anchor %q is being ingested: its log is arriving from another database; try again once the ingest ends", anchor)
	}
	if r.m == nil {
		r.m = map[string]string{}
	}
	r.m[anchor] = holder
	return &AnchorReservation{db: db, anchor: anchor}, nil
}

// Release ends the reservation. It is safe to call more than once.
func (a *AnchorReservation) Release() {
	a.once.Do(func() {
		r := &a.db.reserved
		r.mu.Lock()
		delete(r.m, a.anchor)
		r.mu.Unlock()
	})
}

// refuseReserved is Ingest's check, made once the anchors it joins are in
// db.ingesting (so that a reservation made after it sees them): the first
// of anchors that is reserved, as STATE_001.
func (db *DB) refuseReserved(anchors map[string]bool) error {
	r := &db.reserved
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range slices.Sorted(maps.Keys(anchors)) {
		if h, ok := r.m[a]; ok {
			return errs.New(errs.CodeScopeLocked, "anchor %q of the source is reserved by %s, which keeps its state in memory: close it before ingesting the anchor (or leave the anchor out with --anchor)", a, h)
		}
	}
	return nil
}
