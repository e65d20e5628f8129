package outbox

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// The value of an entry row (kind 'e') is one JSON object, the entry's state
// after one transition, in a canonical form: the fields below in this order,
// times in UTC with nine fractional digits, byte strings as JSON strings
// when they are valid UTF-8 and {"b64":…} otherwise, no HTML escaping, no
// white space. Decoding refuses unknown fields and any text that does not
// encode back to the same bytes, so a record has exactly one spelling.
//
// Two values refer to the record that holds them, whose seq is not known
// when it is built: "enqueue_seq":0 in the record that creates an entry
// (op enqueue or requeued), and "lease":{"token":0,…} in a claim. Readers
// put the record's seq in their place.
type recordJSON struct {
	V             int          `json:"v"`
	Op            string       `json:"op"`
	At            string       `json:"at"`
	By            string       `json:"by,omitempty"`
	Token         uint64       `json:"token,omitempty"` // the lease an extend, complete or fail was accepted under
	State         State        `json:"state"`
	Prev          *prevJSON    `json:"prev"` // the state before this record; null for a new entry
	EnqueueSeq    uint64       `json:"enqueue_seq"`
	EnqueuedAt    string       `json:"enqueued_at"`
	Attempts      int          `json:"attempts"`
	NextAttemptAt string       `json:"next_attempt_at"`
	Fingerprint   segment.Hash `json:"fingerprint"`
	Payload       *bytesJSON   `json:"payload"` // null once dropped (done, aborted)
	PayloadSize   int          `json:"payload_size"`
	Destination   string       `json:"destination,omitempty"`
	Headers       []headerJSON `json:"headers,omitempty"` // sorted by name
	Lease         *leaseJSON   `json:"lease"`
	LastError     *failureJSON `json:"last_error"`
	Result        *bytesJSON   `json:"result,omitempty"`
	DoneAt        string       `json:"done_at,omitempty"`
	DeadAt        string       `json:"dead_at,omitempty"`
	AbortedAt     string       `json:"aborted_at,omitempty"`
	AbortedBy     string       `json:"aborted_by,omitempty"`
	SupersededBy  string       `json:"superseded_by,omitempty"`
	Supersedes    string       `json:"supersedes,omitempty"`
}

type prevJSON struct {
	State State  `json:"state"`
	At    string `json:"at,omitempty"` // the time of its index row, for the states that have one
}

type headerJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type leaseJSON struct {
	Worker    string `json:"worker"`
	Token     uint64 `json:"token"` // 0 in a claim: the claim record's own seq
	ClaimedAt string `json:"claimed_at"`
	ExpiresAt string `json:"expires_at"`
}

type failureJSON struct {
	Message   string `json:"message"`
	Permanent bool   `json:"permanent"`
	At        string `json:"at"`
	Attempt   int    `json:"attempt"`
	PolicyRef string `json:"policy_ref"`
}

// bytesJSON is a byte string: a JSON string when it is valid UTF-8, else
// {"b64":"…"}.
type bytesJSON []byte

func (b bytesJSON) MarshalJSON() ([]byte, error) {
	if utf8.Valid(b) {
		return marshal(string(b))
	}
	return marshal(struct {
		B64 string `json:"b64"`
	}{base64.StdEncoding.EncodeToString(b)})
}

func (b *bytesJSON) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = bytesJSON(s)
		return nil
	}
	var o struct {
		B64 *string `json:"b64"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return err
	}
	if o.B64 == nil {
		return errors.New(`a byte string is a JSON string or {"b64":…}`)
	}
	v, err := base64.StdEncoding.DecodeString(*o.B64)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// UnmarshalText parses a state's name (ParseState).
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// marshal is json.Marshal without HTML escaping and without a trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// timeLayout is RFC 3339 in UTC with exactly nine fractional digits.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func fmtOptTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return fmtTime(t)
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}

func parseOptTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return parseTime(s)
}

// transition is one record of an entry: the op that made it, when and by
// whom, the lease token it was accepted under, and the state before it.
type transition struct {
	op    string
	at    time.Time
	by    string
	token uint64
	prev  *Entry // nil for a new entry
}

// The ops a record names.
const (
	opEnqueue  = "enqueue"  // none → pending
	opRequeued = "requeued" // none → pending: the successor of a requeue
	opClaim    = "claim"    // pending, or inflight with an expired lease → inflight
	opExtend   = "extend"   // inflight → inflight, the same lease later
	opComplete = "complete" // inflight → done
	opFail     = "fail"     // inflight → pending (a retry) or dead
	opExpire   = "expire"   // inflight with an expired lease, its last attempt → dead
	opRequeue  = "requeue"  // pending, dead → aborted
)

// encodeRecord returns the entry row value for e after transition t: the
// recordJSON shape, written field by field (it is on every transition's
// path; encoding/json's reflection cost an enqueue a tenth of its CPU).
// Strings escape '"', '\\' and the control characters (\n, \r and \t by
// those names, the rest as \u00xx) and nothing else.
func encodeRecord(e *Entry, t transition) []byte {
	b := make([]byte, 0, 512+len(e.Payload)*4/3+len(e.Result)*4/3)
	b = append(b, `{"v":1,"op":`...)
	b = appendString(b, t.op)
	b = append(b, `,"at":`...)
	b = appendTime(b, t.at)
	if t.by != "" {
		b = append(b, `,"by":`...)
		b = appendString(b, t.by)
	}
	if t.token != 0 {
		b = append(b, `,"token":`...)
		b = strconv.AppendUint(b, t.token, 10)
	}
	b = append(b, `,"state":`...)
	b = appendString(b, e.State.String())
	b = append(b, `,"prev":`...)
	if t.prev == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"state":`...)
		b = appendString(b, t.prev.State.String())
		if rowKind(t.prev.State) != 0 {
			b = append(b, `,"at":`...)
			b = appendTime(b, time.Unix(0, t.prev.rowTime()))
		}
		b = append(b, '}')
	}
	b = append(b, `,"enqueue_seq":`...)
	b = strconv.AppendUint(b, e.EnqueueSeq, 10)
	b = append(b, `,"enqueued_at":`...)
	b = appendTime(b, e.EnqueuedAt)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	b = append(b, `,"next_attempt_at":`...)
	b = appendTime(b, e.NextAttemptAt)
	b = append(b, `,"fingerprint":"`...)
	b = append(b, e.Fingerprint.String()...)
	b = append(b, `","payload":`...)
	if e.Payload == nil {
		b = append(b, "null"...)
	} else {
		b = appendBytes(b, e.Payload)
	}
	b = append(b, `,"payload_size":`...)
	b = strconv.AppendInt(b, int64(e.PayloadSize), 10)
	if e.Destination != "" {
		b = append(b, `,"destination":`...)
		b = appendString(b, e.Destination)
	}
	if hs := sortedHeaders(e.Headers); len(hs) > 0 {
		b = append(b, `,"headers":[`...)
		for i, h := range hs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendString(b, h.Name)
			b = append(b, `,"value":`...)
			b = appendString(b, h.Value)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"lease":`...)
	if l := e.Lease; l == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"worker":`...)
		b = appendString(b, l.Worker)
		b = append(b, `,"token":`...)
		b = strconv.AppendUint(b, l.Token, 10)
		b = append(b, `,"claimed_at":`...)
		b = appendTime(b, l.ClaimedAt)
		b = append(b, `,"expires_at":`...)
		b = appendTime(b, l.ExpiresAt)
		b = append(b, '}')
	}
	b = append(b, `,"last_error":`...)
	if f := e.LastError; f == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"message":`...)
		b = appendString(b, f.Message)
		b = append(b, `,"permanent":`...)
		b = strconv.AppendBool(b, f.Permanent)
		b = append(b, `,"at":`...)
		b = appendTime(b, f.At)
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(f.Attempt), 10)
		b = append(b, `,"policy_ref":`...)
		b = appendString(b, f.PolicyRef)
		b = append(b, '}')
	}
	if e.Result != nil {
		b = append(b, `,"result":`...)
		b = appendBytes(b, e.Result)
	}
	for _, f := range []struct {
		name string
		t    time.Time
	}{{"done_at", e.DoneAt}, {"dead_at", e.DeadAt}, {"aborted_at", e.AbortedAt}} {
		if !f.t.IsZero() {
			b = append(b, ',', '"')
			b = append(b, f.name...)
			b = append(b, '"', ':')
			b = appendTime(b, f.t)
		}
	}
	for _, f := range []struct{ name, v string }{{"aborted_by", e.AbortedBy}, {"superseded_by", e.SupersededBy}, {"supersedes", e.Supersedes}} {
		if f.v != "" {
			b = append(b, ',', '"')
			b = append(b, f.name...)
			b = append(b, '"', ':')
			b = appendString(b, f.v)
		}
	}
	return append(b, '}')
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, timeLayout)
	return append(b, '"')
}

// appendBytes appends a byte string: a JSON string when it is valid UTF-8,
// else {"b64":"…"}.
func appendBytes(b, v []byte) []byte {
	if utf8.Valid(v) {
		return appendString(b, string(v))
	}
	b = append(b, `{"b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, `"}`...)
}

// appendString appends s, valid UTF-8, as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func sortedHeaders(h map[string]string) []headerJSON {
	if len(h) == 0 {
		return nil
	}
	out := make([]headerJSON, 0, len(h))
	for k, v := range h {
		out = append(out, headerJSON{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// decoded is an entry row value read back: the entry (with the record's own
// seq in place of the zeros that refer to it), the transition, and the row
// the state before it had.
type decoded struct {
	entry   Entry
	op      string
	at      time.Time
	by      string
	token   uint64
	prev    rowRef // prev.state 0: a new entry
	selfEnq bool   // enqueue_seq was 0 (this record)
	selfTok bool   // the lease token was 0 (this record)
}

// decodeRecord decodes an entry row value written by the record with
// receipt rc, for entry id of outbox name. A value that is not an entry
// record in its canonical form is INT_004.
func decodeRecord(name, id string, value []byte, rc engine.Receipt) (*decoded, error) {
	return decodeRecordCheck(name, id, value, rc, true)
}

// decodeTrusted is decodeRecord without the check of the canonical form,
// for the values the Outbox reads on its hot paths (claims, lookups,
// listings): they were written by it, and Verify and Open check them.
func decodeTrusted(name, id string, value []byte, rc engine.Receipt) (*decoded, error) {
	return decodeRecordCheck(name, id, value, rc, false)
}

func decodeRecordCheck(name, id string, value []byte, rc engine.Receipt, canonical bool) (*decoded, error) {
	bad := func(format string, args ...any) error {
		e := errs.New(errs.CodeIndexMismatch, "outbox %q entry %q: record %d: "+format, append([]any{name, id, rc.Seq}, args...)...)
		e.Anchor, e.Seq = rc.Anchor, rc.Seq
		return e
	}
	var r recordJSON
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, bad("not an outbox entry record: %v", err)
	}
	if dec.More() {
		return nil, bad("data after the record")
	}
	if r.V != 1 {
		return nil, bad("record version %d (want 1)", r.V)
	}
	d := &decoded{op: r.Op, by: r.By, token: r.Token}
	e := &d.entry
	*e = Entry{Outbox: name, ID: id, State: r.State, EnqueueSeq: r.EnqueueSeq, Attempts: r.Attempts,
		Fingerprint: r.Fingerprint, PayloadSize: r.PayloadSize, Destination: r.Destination,
		AbortedBy: r.AbortedBy, SupersededBy: r.SupersededBy, Supersedes: r.Supersedes, Receipt: rc}
	var err error
	times := []struct {
		dst *time.Time
		s   string
		opt bool
	}{{&d.at, r.At, false}, {&e.EnqueuedAt, r.EnqueuedAt, false}, {&e.NextAttemptAt, r.NextAttemptAt, false},
		{&e.DoneAt, r.DoneAt, true}, {&e.DeadAt, r.DeadAt, true}, {&e.AbortedAt, r.AbortedAt, true}}
	for _, t := range times {
		if t.opt {
			*t.dst, err = parseOptTime(t.s)
		} else {
			*t.dst, err = parseTime(t.s)
		}
		if err != nil {
			return nil, bad("a time: %v", err)
		}
	}
	if r.State < StatePending || r.State > StateAborted {
		return nil, bad("no state")
	}
	if r.Payload != nil {
		e.Payload = []byte(*r.Payload)
		if len(e.Payload) != r.PayloadSize {
			return nil, bad("payload of %d bytes, payload_size %d", len(e.Payload), r.PayloadSize)
		}
	}
	if len(r.Headers) > 0 {
		e.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			e.Headers[h.Name] = h.Value
		}
	}
	if r.Lease != nil {
		l := &Lease{ID: id, Worker: r.Lease.Worker, Token: r.Lease.Token}
		if l.ClaimedAt, err = parseTime(r.Lease.ClaimedAt); err == nil {
			l.ExpiresAt, err = parseTime(r.Lease.ExpiresAt)
		}
		if err != nil {
			return nil, bad("lease: %v", err)
		}
		if l.Token == 0 {
			d.selfTok = true
			l.Token = rc.Seq
		}
		e.Lease = l
	}
	if (e.State == StateInflight) != (e.Lease != nil) {
		return nil, bad("state %s with lease %v", e.State, e.Lease != nil)
	}
	if r.LastError != nil {
		f := &Failure{Message: r.LastError.Message, Permanent: r.LastError.Permanent, Attempt: r.LastError.Attempt, PolicyRef: r.LastError.PolicyRef}
		if f.At, err = parseTime(r.LastError.At); err != nil {
			return nil, bad("last_error: %v", err)
		}
		e.LastError = f
	}
	if r.Result != nil {
		e.Result = []byte(*r.Result)
	}
	if r.Prev != nil {
		d.prev.state = r.Prev.State
		if r.Prev.State < StatePending || r.Prev.State > StateAborted {
			return nil, bad("prev has no state")
		}
		if rowKind(r.Prev.State) != 0 {
			at, err := parseTime(r.Prev.At)
			if err != nil {
				return nil, bad("prev: %v", err)
			}
			d.prev.at = at.UnixNano()
		}
	}
	if e.EnqueueSeq == 0 {
		d.selfEnq = true
		e.EnqueueSeq = rc.Seq
	}
	if !canonical {
		return d, nil
	}
	// One spelling: the value must be what encoding the decoded record gives.
	c := *e
	if d.selfEnq {
		c.EnqueueSeq = 0
	}
	if d.selfTok {
		l := *c.Lease
		l.Token = 0
		c.Lease = &l
	}
	var prev *Entry
	if r.Prev != nil {
		prev = prevEntry(d.prev)
	}
	if again := encodeRecord(&c, transition{op: d.op, at: d.at, by: d.by, token: d.token, prev: prev}); !bytes.Equal(again, value) {
		return nil, bad("not in the canonical form")
	}
	return d, nil
}

// prevEntry is an Entry that has only the state and row time of r, enough to
// encode a record's "prev".
func prevEntry(r rowRef) *Entry {
	e := &Entry{State: r.state}
	t := time.Unix(0, r.at)
	switch r.state {
	case StatePending:
		e.NextAttemptAt = t
	case StateInflight:
		e.Lease = &Lease{ExpiresAt: t}
	case StateDead:
		e.DeadAt = t
	}
	return e
}

// fingerprintContext separates the outbox's fingerprints from every other
// BLAKE3 the database computes.
const fingerprintContext = "anchordb 2026-11 outbox fingerprint v1"

var fingerprintBase = blake3.NewDeriveKey(fingerprintContext)

// Fingerprint is the hash Enqueue compares a retry with (CONTRACT §12): BLAKE3
// in derive-key mode over the payload, the destination and the headers
// sorted by name, each length-prefixed (docs/OUTBOX.md).
func Fingerprint(payload []byte, destination string, headers map[string]string) segment.Hash {
	h := fingerprintBase.Clone()
	var n [8]byte
	putLen := func(l int) {
		binary.BigEndian.PutUint64(n[:], uint64(l))
		_, _ = h.Write(n[:])
	}
	put := func(b []byte) {
		putLen(len(b))
		_, _ = h.Write(b)
	}
	put(payload)
	put([]byte(destination))
	hs := sortedHeaders(headers)
	putLen(len(hs))
	for _, kv := range hs {
		put([]byte(kv.Name))
		put([]byte(kv.Value))
	}
	var out segment.Hash
	h.Sum(out[:0])
	return out
}
