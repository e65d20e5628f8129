package outbox

import (
	"fmt"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// State is where an entry is in its life (CONTRACT §12):
//
//	pending ──claim──► inflight ──complete──► done
//	   ▲                  │ fail (retryable) or lease expired
//	   └──────────────────┘
//	inflight ──fail (permanent, or the last attempt)──► dead
//	pending, dead ──requeue──► aborted (its successor is a new pending entry)
//
// done, dead and aborted are terminal, except that dead (and pending) may
// be requeued.
type State uint8

// The states.
const (
	StatePending State = iota + 1
	StateInflight
	StateDone
	StateDead
	StateAborted
)

// numStates is the number of states; counts are indexed by State-1.
const numStates = 5

var stateNames = [...]string{"", "pending", "inflight", "done", "dead", "aborted"}

// String is the state's name: "pending", "inflight", "done", "dead",
// "aborted" ("none" for the zero State).
func (s State) String() string {
	if s >= 1 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "none"
}

// States lists the states in their order.
func States() []State {
	return []State{StatePending, StateInflight, StateDone, StateDead, StateAborted}
}

// ParseState parses a state's name. An unknown name is INPUT_001.
func ParseState(s string) (State, error) {
	for i := 1; i < len(stateNames); i++ {
		if stateNames[i] == s {
			return State(i), nil
		}
	}
	return 0, errs.New(errs.CodeInvalidInput, "unknown state %q (want pending, inflight, done, dead or aborted)", s)
}

// MarshalText gives the state's name (JSON prints it as a string).
func (s State) MarshalText() ([]byte, error) {
	if s < 1 || int(s) >= len(stateNames) {
		return nil, fmt.Errorf("outbox: no state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// Message is what Enqueue takes: an id chosen by the caller (the idempotency
// key of the promise), the payload and its metadata.
type Message struct {
	ID      string
	Payload []byte
	// Destination and Headers are metadata for the handler (where to
	// deliver, how). With the payload they make the fingerprint.
	Destination string
	Headers     map[string]string
	// NotBefore, if later than now, delays the first attempt until then.
	// It is not part of the fingerprint: a retry of the enqueue with another
	// NotBefore is the same promise.
	NotBefore time.Time
}

// Entry is one promise of an outbox in one state: what Enqueue, Claim, Get
// and the rest return. An Entry is a value; the outbox does not change it
// after returning it.
type Entry struct {
	Outbox string
	ID     string
	State  State
	// Payload is the message's payload; nil once the entry is done or
	// aborted (those records leave it out, so a compaction may drop it with
	// the older records: PayloadSize and the fingerprint stay).
	Payload     []byte
	PayloadSize int
	Destination string
	Headers     map[string]string
	// Fingerprint is BLAKE3 of the payload and metadata (docs/OUTBOX.md):
	// what Enqueue compares a retry with.
	Fingerprint segment.Hash
	// Attempts counts the claims made of the entry so far; it never goes
	// down.
	Attempts int
	// EnqueuedAt is when the entry was enqueued; EnqueueSeq the seq of the
	// record that enqueued it on the outbox's anchor: its enqueue order.
	EnqueuedAt time.Time
	EnqueueSeq uint64
	// NextAttemptAt is when a pending entry is due.
	NextAttemptAt time.Time
	// Lease is the current lease of an inflight entry, else nil.
	Lease *Lease
	// LastError is the last failure recorded, nil if none.
	LastError *Failure
	// Result is what Complete recorded.
	Result []byte
	// DoneAt, DeadAt and AbortedAt date the terminal states.
	DoneAt    time.Time
	DeadAt    time.Time
	AbortedAt time.Time
	// AbortedBy names who requeued an aborted entry; SupersededBy its
	// successor. Supersedes names the entry a requeue replaced with this one.
	AbortedBy    string
	SupersededBy string
	Supersedes   string
	// Receipt is the receipt of the record that wrote this state.
	Receipt engine.Receipt
	// Duplicate is set when Enqueue answered a retry with the entry as it
	// is, appending nothing.
	Duplicate bool
}

// Lease is a claim on an inflight entry: until it expires, or another claim
// takes the entry after it expired, its holder is the one worker whose
// Complete, Fail and Extend are accepted. Token is the fencing token: the
// seq of the claim's record on the outbox's anchor, so a later claim always
// has a greater token.
type Lease struct {
	ID        string
	Worker    string
	Token     uint64
	ClaimedAt time.Time
	ExpiresAt time.Time
}

// Failure is a recorded failure of an attempt.
type Failure struct {
	Message   string
	Permanent bool
	At        time.Time
	// Attempt is the attempt that failed.
	Attempt int
	// PolicyRef is the retry policy the next attempt (or the death) was
	// decided under.
	PolicyRef string
}

// rowTime is the time of the entry's index row: next_attempt_at for a
// pending entry, the lease's expiry for an inflight one, dead_at for a dead
// one, 0 for the others (which have no row).
func (e *Entry) rowTime() int64 {
	switch e.State {
	case StatePending:
		return e.NextAttemptAt.UnixNano()
	case StateInflight:
		return e.Lease.ExpiresAt.UnixNano()
	case StateDead:
		return e.DeadAt.UnixNano()
	}
	return 0
}

// rowRef names an entry's index row: its state (the kind) and time. The zero
// rowRef is no row.
type rowRef struct {
	state State
	at    int64
}

func (e *Entry) rowRef() rowRef {
	if e == nil {
		return rowRef{}
	}
	switch e.State {
	case StatePending, StateInflight, StateDead:
		return rowRef{state: e.State, at: e.rowTime()}
	}
	return rowRef{state: e.State}
}

// rowKind is the row kind of a state, 0 for a state without rows.
func rowKind(s State) byte {
	switch s {
	case StatePending:
		return kindReady
	case StateInflight:
		return kindLease
	case StateDead:
		return kindDead
	}
	return 0
}

// clone returns a copy that shares no mutable part with e.
func (e *Entry) clone() Entry {
	c := *e
	if e.Lease != nil {
		l := *e.Lease
		c.Lease = &l
	}
	if e.LastError != nil {
		f := *e.LastError
		c.LastError = &f
	}
	if e.Headers != nil {
		c.Headers = make(map[string]string, len(e.Headers))
		for k, v := range e.Headers {
			c.Headers[k] = v
		}
	}
	c.Payload = append([]byte(nil), e.Payload...)
	if e.Payload == nil {
		c.Payload = nil
	}
	c.Result = append([]byte(nil), e.Result...)
	if e.Result == nil {
		c.Result = nil
	}
	return c
}
