package outbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// Finding is one problem Verify found in an outbox: its code (INT_002 for a
// transition the state machine does not allow, INT_004 for an index row or
// a record the outbox's projection disagrees with), the entry and the
// record it concerns where it has one, and what is wrong.
type Finding struct {
	Code    engine.Code `json:"code"`
	Reason  string      `json:"reason"`
	Outbox  string      `json:"outbox"`
	Anchor  string      `json:"anchor"`
	ID      string      `json:"id,omitempty"`
	Seq     uint64      `json:"seq,omitempty"`
	Message string      `json:"message"`
}

// Error returns the finding as one line.
func (f Finding) Error() string {
	s := fmt.Sprintf("%s %s: outbox %q", f.Code, f.Reason, f.Outbox)
	if f.ID != "" {
		s += fmt.Sprintf(" entry %q", f.ID)
	}
	if f.Seq != 0 {
		s += fmt.Sprintf(" seq %d", f.Seq)
	}
	return s + ": " + f.Message
}

// Report is what Verify found.
type Report struct {
	Outbox   string    `json:"outbox"`
	OK       bool      `json:"ok"`
	Records  uint64    `json:"records"` // records of the anchor replayed
	Entries  int       `json:"entries"`
	Mark     uint64    `json:"mark"` // the watermark the rows stand at
	Failures []Finding `json:"failures"`
	// Truncated is set when a compaction removed records of the anchor:
	// the transitions into the removed stretch are not checked, nor are
	// the rows when records up to the watermark are gone (until the next
	// flush moves the watermark past them).
	Truncated bool `json:"truncated"`
}

// maxFindings bounds the findings one Verify reports.
const maxFindings = 1000

// vstate is what Verify keeps of one entry while it replays the log.
type vstate struct {
	state    State
	row      rowRef
	enqSeq   uint64
	attempts int
	token    uint64
	fp       segment.Hash
	unsure   bool // records of the entry may have been truncated since the last one seen
	// The entry's last record: what its row holds (rowValue), the value
	// as a hash.
	rc      engine.Receipt
	valHash [32]byte
}

// rowWant is what a row at the watermark must hold: its entry's record.
type rowWant struct {
	rc      engine.Receipt
	valHash [32]byte
}

// Verify checks the outbox NAME of db against its log: it replays every
// record of the anchor in seq order and checks that each entry record is
// a canonical outbox record whose transition the state machine allows
// from the state the replay has (right op, attempts up by one on a claim
// and never down, fencing tokens, fingerprints, a requeue followed by its
// successor, an id never freed or reused); that the index rows (pending,
// inflight and dead, by time) are exactly those of every entry's state at
// the mark's watermark, and the mark's counts those there; and that no
// key under the outbox's prefix was written by another anchor. It returns
// an error only when it cannot check (bad name, I/O, ctx).
//
// Use it on a database where the outbox is not open, or through
// Outbox.Verify, which holds the outbox's flushes back while it runs.
func Verify(ctx context.Context, db *engine.DB, name string) (Report, error) {
	if err := ValidateName(name); err != nil {
		return Report{}, err
	}
	return verify(ctx, db, name)
}

// Verify is the package's Verify of this outbox, with its flushes held
// back meanwhile so that the rows stand still.
func (o *Outbox) Verify(ctx context.Context) (Report, error) {
	if err := o.enter(false); err != nil {
		return Report{}, err
	}
	defer o.leave()
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	return verify(ctx, o.db, o.name)
}

func verify(ctx context.Context, db *engine.DB, name string) (Report, error) {
	k := newKeys(name)
	anchor := AnchorPrefix + name
	rep := Report{Outbox: name, Failures: []Finding{}}
	add := func(code engine.Code, id string, seq uint64, format string, args ...any) {
		if len(rep.Failures) < maxFindings {
			rep.Failures = append(rep.Failures, Finding{Code: code, Reason: code.Reason(), Outbox: name, Anchor: anchor, ID: id, Seq: seq, Message: fmt.Sprintf(format, args...)})
		}
	}

	// The mark.
	var m mark
	haveMark := false
	if v, err := db.Get(ctx, k.mark()); err == nil {
		if v.Anchor != anchor {
			add(errs.CodeIndexMismatch, "", v.Seq, "the mark row was written by anchor %q", v.Anchor)
		} else if m, err = k.decodeMark(name, v.Value, v.Receipt); err != nil {
			add(errs.CodeIndexMismatch, "", v.Seq, "%s", errs.Message(err))
		} else {
			haveMark = true
		}
	} else if !errors.Is(err, engine.ErrNotFound) {
		return rep, err
	}
	rep.Mark = m.w

	// The replay.
	states := map[string]*vstate{}
	var expected map[string]rowWant // the rows at the watermark
	var atMark counts
	markChecked := false
	takeMark := func() {
		expected = map[string]rowWant{}
		atMark = counts{}
		for id, s := range states {
			atMark[s.state-1]++
			if c := rowKind(s.state); c != 0 {
				expected[string(k.row(c, s.row.at, s.enqSeq, id))] = rowWant{rc: s.rc, valHash: s.valHash}
			}
		}
		markChecked = true
	}
	var requeued struct {
		seq      uint64
		from, to string
	}
	// After a truncating compaction the log holds, below its cut, only the
	// copies the compaction kept (each key's last record in each removed
	// segment) and, in place of each run that is gone, a STATE_003: the
	// entries' states there come from the kept copies, and transitions
	// across a gap are not checked.
	next := uint64(1)
	truncatedMark := false
	for rec, err := range db.Log(ctx, anchor, 1, 0) {
		if err != nil {
			if isGoneRun(err, anchor) {
				rep.Truncated = true
				continue // the record after the run has rec.Seq != next
			}
			if engine.CodeOf(err) == errs.CodeDependencyMissing && next == 1 {
				break // no such anchor: an outbox with no records
			}
			return rep, err
		}
		if rec.Seq != next {
			rep.Truncated = true
			// A requeue's successor record right after it may be in
			// the gap: the compaction kept the requeue (the old row's
			// last record) and dropped it.
			requeued.seq = 0
			for _, s := range states {
				s.unsure = true
			}
			// Records up to the watermark are gone: the states there
			// cannot be replayed, so neither can the rows be checked.
			if haveMark && !markChecked && m.w >= next {
				truncatedMark = true
			}
		}
		if haveMark && !markChecked && !truncatedMark && m.w == rec.Seq-1 {
			takeMark()
		}
		next = rec.Seq + 1
		rep.Records++
		if requeued.seq != 0 && rec.Seq != requeued.seq+1 {
			add(errs.CodeChainBroken, requeued.from, requeued.seq, "requeue to %q is not followed by its successor's record", requeued.to)
			requeued.seq = 0
		}
		id, isEntry := k.parseEntryKey(rec.Key)
		switch {
		case !strings.HasPrefix(string(rec.Key), string(k.prefix)):
			add(errs.CodeIndexMismatch, "", rec.Seq, "a %s record with key %q on the outbox's anchor is not the outbox's", rec.Type, rec.Key)
			continue
		case !isEntry:
			c := rec.Key[len(k.prefix)]
			if c != kindReady && c != kindLease && c != kindDead && c != kindMark {
				add(errs.CodeIndexMismatch, "", rec.Seq, "key %q is under the outbox's prefix but of no kind it writes", rec.Key)
			}
			continue
		case rec.Type != segment.TypePut:
			add(errs.CodeChainBroken, id, rec.Seq, "a %s of the entry row: an id is never freed", rec.Type)
			continue
		}
		rc := engine.Receipt{Anchor: rec.Anchor, Seq: rec.Seq, Counter: rec.Counter, Hash: rec.Hash}
		d, err := decodeRecord(name, id, rec.Value, rc)
		if err != nil {
			add(errs.CodeIndexMismatch, id, rec.Seq, "%s", errs.Message(err))
			continue
		}
		s := states[id]
		if requeued.seq != 0 {
			if id != requeued.to || d.op != opRequeued || d.entry.Supersedes != requeued.from {
				add(errs.CodeChainBroken, requeued.from, requeued.seq, "requeue to %q is followed by %s of %q, not its successor", requeued.to, d.op, id)
			}
			requeued.seq = 0
		}
		if msg := checkTransition(s, d, rep.Truncated); msg != "" {
			add(errs.CodeChainBroken, id, rec.Seq, "%s", msg)
		}
		if d.entry.Payload != nil {
			if fp := Fingerprint(d.entry.Payload, d.entry.Destination, d.entry.Headers); fp != d.entry.Fingerprint {
				add(errs.CodeIndexMismatch, id, rec.Seq, "fingerprint %s is not that of the payload and metadata (%s)", d.entry.Fingerprint, fp)
			}
		}
		if d.op == opRequeue {
			requeued.seq, requeued.from, requeued.to = rec.Seq, id, d.entry.SupersededBy
		}
		if s == nil {
			s = &vstate{}
			states[id] = s
		}
		e := &d.entry
		*s = vstate{state: e.State, row: e.rowRef(), enqSeq: e.EnqueueSeq, attempts: e.Attempts, fp: e.Fingerprint,
			rc: rc, valHash: blake3.Sum256(rec.Value)}
		if e.Lease != nil {
			s.token = e.Lease.Token
		}
	}
	if requeued.seq != 0 {
		add(errs.CodeChainBroken, requeued.from, requeued.seq, "requeue to %q is not followed by its successor's record", requeued.to)
	}
	rep.Entries = len(states)
	if haveMark && !markChecked && !truncatedMark && m.w == next-1 {
		takeMark()
	}
	if haveMark && !markChecked && !truncatedMark {
		add(errs.CodeIndexMismatch, "", 0, "the mark's watermark %d is past the anchor's last record %d", m.w, next-1)
	}
	if !haveMark {
		// No mark: no flush yet, so no rows.
		expected, markChecked = map[string]rowWant{}, true
	}

	// The rows and the keys under the prefix.
	for v, err := range db.ScanRange(ctx, k.prefix, k.end()) {
		if err != nil {
			return rep, err
		}
		if v.Anchor != anchor {
			add(errs.CodeIndexMismatch, "", 0, "key %q under the outbox's prefix was written by anchor %q (seq %d)", v.Key, v.Anchor, v.Seq)
			continue
		}
		c := v.Key[len(k.prefix)]
		if c != kindReady && c != kindLease && c != kindDead || !markChecked {
			continue
		}
		if want, ok := expected[string(v.Key)]; ok {
			delete(expected, string(v.Key))
			if !rowHolds(v.Value, want) {
				_, _, id, _ := k.parseRow(c, v.Key)
				add(errs.CodeIndexMismatch, id, v.Seq, "row %q does not hold the entry's record at the watermark %d (seq %d)", v.Key, m.w, want.rc.Seq)
			}
			if c != kindDead {
				if f := m.from[fromIdx(c)]; f != nil && bytes.Compare(v.Key, f) < 0 {
					_, _, id, _ := k.parseRow(c, v.Key)
					add(errs.CodeIndexMismatch, id, v.Seq, "row %q is before where the mark says claims scan from (%q): no claim would find it", v.Key, f)
				}
			}
			continue
		}
		_, _, id, _ := k.parseRow(c, v.Key)
		add(errs.CodeIndexMismatch, id, v.Seq, "row %q is not one of the entry's state at the watermark %d", v.Key, m.w)
	}
	if markChecked {
		missing := make([]string, 0, len(expected))
		for key := range expected {
			missing = append(missing, key)
		}
		sort.Strings(missing)
		for _, key := range missing {
			_, _, id, _ := k.parseRow(key[len(k.prefix)], []byte(key))
			add(errs.CodeIndexMismatch, id, 0, "the entry's state at the watermark %d has row %q, which is missing", m.w, key)
		}
		if haveMark && atMark != m.counts {
			add(errs.CodeIndexMismatch, "", 0, "the mark counts %v at the watermark %d; the log gives %v", m.counts, m.w, atMark)
		}
	}
	rep.OK = len(rep.Failures) == 0
	return rep, nil
}

// isGoneRun reports whether err is the STATE_003 that Log yields in place
// of a run of anchor's records a truncating compaction removed without
// keeping a copy (its Seq is the run's first), as opposed to the STATE_003
// of an anchor the database does not hold (Seq 0).
func isGoneRun(err error, anchor string) bool {
	var e *engine.Error
	return engine.CodeOf(err) == errs.CodeDependencyMissing && errors.As(err, &e) && e.Anchor == anchor && e.Seq > 0
}

// rowHolds reports whether a row's value is the record want names.
func rowHolds(value []byte, want rowWant) bool {
	if len(value) < rowValueHeader {
		return false
	}
	return binary.BigEndian.Uint64(value) == want.rc.Seq && binary.BigEndian.Uint64(value[8:]) == want.rc.Counter &&
		string(value[16:rowValueHeader]) == string(want.rc.Hash[:]) && blake3.Sum256(value[rowValueHeader:]) == want.valHash
}

// checkTransition returns what is wrong with record d of an entry whose
// replayed state is s (nil: none yet), or "". truncated says records
// before d may be missing.
func checkTransition(s *vstate, d *decoded, truncated bool) string {
	e := &d.entry
	if s == nil {
		switch {
		case d.prev.state != 0 && truncated:
			// Its earlier records may be gone: take prev as given.
			s = &vstate{state: d.prev.state, row: d.prev, unsure: true}
		case d.op != opEnqueue && d.op != opRequeued || d.prev.state != 0:
			return fmt.Sprintf("the first record of the entry is %s from %s, not an enqueue", d.op, d.prev.state)
		}
	} else if d.prev.state == 0 {
		return fmt.Sprintf("%s of an id already held (%s): an id is never reused", d.op, s.state)
	}
	if s != nil && !s.unsure && !sameRow(d.prev, s.row) || s != nil && !s.unsure && d.prev.state != s.state {
		return fmt.Sprintf("the record says the entry was %s (row time %d); the log has it %s (%d)", d.prev.state, d.prev.at, s.state, s.row.at)
	}
	from := d.prev.state
	to := e.State
	ok := false
	switch d.op {
	case opEnqueue, opRequeued:
		ok = from == 0 && to == StatePending && d.selfEnq && e.Attempts == 0 && (d.op == opRequeued) == (e.Supersedes != "")
	case opClaim:
		ok = (from == StatePending || from == StateInflight) && to == StateInflight && d.selfTok
		if ok && s != nil && !s.unsure && e.Attempts != s.attempts+1 {
			return fmt.Sprintf("a claim takes attempts from %d to %d", s.attempts, e.Attempts)
		}
	case opExtend:
		ok = from == StateInflight && to == StateInflight && !d.selfTok && d.token == e.Lease.Token
	case opComplete:
		ok = from == StateInflight && to == StateDone && e.Payload == nil
	case opFail:
		ok = from == StateInflight && (to == StatePending || to == StateDead) && e.LastError != nil
	case opExpire:
		ok = from == StateInflight && to == StateDead
	case opRequeue:
		ok = (from == StatePending || from == StateDead) && to == StateAborted && e.SupersededBy != "" && e.Payload == nil
	}
	if !ok {
		return fmt.Sprintf("%s from %s to %s is not a transition the outbox makes (or its fields are not those of one)", d.op, from, to)
	}
	if s == nil || s.unsure {
		return ""
	}
	switch {
	case e.Attempts < s.attempts:
		return fmt.Sprintf("attempts go down from %d to %d", s.attempts, e.Attempts)
	case d.op != opClaim && e.Attempts != s.attempts:
		return fmt.Sprintf("%s changes attempts from %d to %d", d.op, s.attempts, e.Attempts)
	case e.EnqueueSeq != s.enqSeq:
		return fmt.Sprintf("enqueue_seq changes from %d to %d", s.enqSeq, e.EnqueueSeq)
	case e.Fingerprint != s.fp && d.op != opRequeued:
		return "the fingerprint changes"
	}
	switch d.op {
	case opExtend, opComplete, opFail:
		if d.token != s.token {
			return fmt.Sprintf("%s under lease %d; the entry's lease is %d", d.op, d.token, s.token)
		}
	}
	return ""
}
