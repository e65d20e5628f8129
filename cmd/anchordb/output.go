package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// output is the buffered stdout of a command. It remembers the first write
// error, so a stream stops as soon as its reader goes away.
type output struct {
	w   *bufio.Writer
	err error
}

func newOutput(w io.Writer) *output { return &output{w: bufio.NewWriterSize(w, 64<<10)} }

// json prints v as one line of JSON (no HTML escaping).
func (o *output) json(v any) {
	if o.err != nil {
		return
	}
	b, err := marshal(v)
	if err != nil {
		o.err = err
		return
	}
	b = append(b, '\n')
	_, o.err = o.w.Write(b)
}

// linef prints one line of human output.
func (o *output) linef(format string, args ...any) {
	if o.err != nil {
		return
	}
	_, o.err = fmt.Fprintf(o.w, format+"\n", args...)
}

// write prints raw bytes (get --raw).
func (o *output) write(b []byte) {
	if o.err != nil {
		return
	}
	_, o.err = o.w.Write(b)
}

func (o *output) flush() error {
	if o.err != nil {
		return o.err
	}
	o.err = o.w.Flush()
	return o.err
}

// brokenPipe reports whether err is stdout's reader going away.
func (o *output) brokenPipe(err error) bool { return errors.Is(err, syscall.EPIPE) }

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

// byteString prints as a JSON string when it is valid UTF-8, else as
// {"b64":"<standard base64>"} (SPEC §10).
type byteString []byte

func (b byteString) MarshalJSON() ([]byte, error) {
	if utf8.Valid(b) {
		return marshal(string(b))
	}
	return marshal(b64JSON{B64: base64.StdEncoding.EncodeToString(b)})
}

type b64JSON struct {
	B64 string `json:"b64"`
}

// optBytes is b as a byteString, or nil (JSON null) when b is empty.
func optBytes(b []byte) *byteString {
	if len(b) == 0 {
		return nil
	}
	s := byteString(b)
	return &s
}

// timeFormat is RFC 3339 in UTC with exactly nine fractional digits.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string {
	return t.UTC().Format(timeFormat)
}

// recordJSON is the record shape of SPEC §10.
type recordJSON struct {
	Anchor         string       `json:"anchor"`
	Seq            uint64       `json:"seq"`
	Counter        uint64       `json:"counter"`
	Time           string       `json:"time"`
	Type           string       `json:"type"`
	Key            *byteString  `json:"key"`   // null for an event without a key
	Value          *byteString  `json:"value"` // null for a delete
	IdempotencyKey *byteString  `json:"idempotency_key"`
	PrevHash       segment.Hash `json:"prev_hash"`
	Hash           segment.Hash `json:"hash"`
}

func newRecordJSON(r *engine.Record) recordJSON {
	j := recordJSON{
		Anchor: r.Anchor, Seq: r.Seq, Counter: r.Counter, Time: formatTime(r.Time), Type: r.Type,
		Key: optBytes(r.Key), IdempotencyKey: optBytes(r.IdempotencyKey),
		PrevHash: r.PrevHash, Hash: r.Hash,
	}
	if r.Type != segment.TypeDelete {
		v := byteString(r.Value)
		if v == nil {
			v = byteString{}
		}
		j.Value = &v
	}
	return j
}

// printRecord prints one record: its JSON shape, or one readable line.
func (e *env) printRecord(r *engine.Record) {
	if e.g.json {
		e.out.json(newRecordJSON(r))
		return
	}
	e.out.linef("%s", recordLine(r))
}

// recordLine is the human form of a record:
//
//	dev-1 #2 counter=5 2026-01-31T12:00:00.000000001Z put color=green blake3:…
func recordLine(r *engine.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d counter=%d %s %s ", display([]byte(r.Anchor)), r.Seq, r.Counter, formatTime(r.Time), display([]byte(r.Type)))
	switch {
	case r.Type == segment.TypeDelete:
		b.WriteString(display(r.Key))
	case len(r.Key) > 0:
		b.WriteString(display(r.Key) + "=" + display(r.Value))
	default:
		b.WriteString(display(r.Value))
	}
	if len(r.IdempotencyKey) > 0 {
		b.WriteString(" idempotency_key=" + display(r.IdempotencyKey))
	}
	b.WriteString(" " + r.Hash.String())
	return b.String()
}

// printReceipt prints an append receipt.
func (e *env) printReceipt(r engine.Receipt) {
	if e.g.json {
		e.out.json(r)
		return
	}
	if e.g.quiet {
		return
	}
	dup := ""
	if r.Duplicate {
		dup = " (duplicate: nothing appended)"
	}
	e.out.linef("%s #%d counter=%d %s%s", display([]byte(r.Anchor)), r.Seq, r.Counter, r.Hash, dup)
}

// display renders bytes for human output: as they are when they are plain
// printable UTF-8, else Go-quoted (invalid bytes as \xff); long values are cut.
func display(b []byte) string {
	const maxShown = 64
	cut := len(b) > maxShown
	shown := b
	if cut {
		shown = b[:maxShown]
		for len(shown) > 0 && !utf8.Valid(shown) && utf8.Valid(b) {
			shown = shown[:len(shown)-1] // do not split a rune of a valid string
		}
	}
	s := string(shown)
	if len(b) == 0 || !plain(s) || !utf8.Valid(b) {
		s = strconv.Quote(s)
	}
	if cut {
		s += fmt.Sprintf("…(%d bytes)", len(b))
	}
	return s
}

func plain(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' || r == '=' || r == '\\' {
			return false
		}
	}
	return true
}

// errorBody is the JSON error shape of SPEC §10 with the optional details an
// error carries: its location, an idempotency conflict's original receipt
// and fingerprints, a refusal's retry hint, an import's line.
type errorBody struct {
	Code    string `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`

	Anchor string `json:"anchor,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	File   string `json:"file,omitempty"`
	Offset int64  `json:"offset,omitempty"`

	Original             *engine.Receipt `json:"original,omitempty"`
	ExistingFingerprint  string          `json:"existing_fingerprint,omitempty"`
	RequestedFingerprint string          `json:"requested_fingerprint,omitempty"`

	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// A refusal's capacity state.
	InFlightRecords *int   `json:"in_flight_records,omitempty"`
	InFlightBytes   *int64 `json:"in_flight_bytes,omitempty"`
	MaxRecords      int    `json:"max_in_flight_records,omitempty"`
	MaxBytes        int64  `json:"max_in_flight_bytes,omitempty"`

	Line       int  `json:"line,omitempty"`
	Imported   *int `json:"imported,omitempty"`
	Duplicates *int `json:"duplicates,omitempty"`
	// Appended: the records an interrupted or failed ingest joined.
	Appended *uint64 `json:"appended,omitempty"`

	// An ingest refused for a fork: both heads of the anchor.
	Ours   *headJSON `json:"ours,omitempty"`
	Theirs *headJSON `json:"theirs,omitempty"`

	// An outbox's refusal: the entry's state, and the entry.
	State string           `json:"state,omitempty"`
	Entry *outboxEntryJSON `json:"entry,omitempty"`
}

// headJSON is an anchor's head: its last seq and that record's hash.
type headJSON struct {
	Seq  uint64       `json:"seq"`
	Hash segment.Hash `json:"hash"`
}

type errorJSONShape struct {
	Error errorBody `json:"error"`
}

// codeOf is the code an error is reported under: its own, or IO_001 for an
// error without one (the CLI's catch-all for failures of the system).
func codeOf(err error) errs.Code {
	if c := engine.CodeOf(err); c != "" {
		return c
	}
	return errs.CodeWriteFailed
}

func errorJSON(err error) errorJSONShape {
	code := codeOf(err)
	b := errorBody{Code: string(code), Reason: code.Reason(), Message: messageOf(err)}
	var e *errs.Error
	if errors.As(err, &e) {
		b.Anchor, b.Seq, b.File, b.Offset = e.Anchor, e.Seq, e.File, e.Offset
	}
	var ce *engine.ConflictError
	if errors.As(err, &ce) {
		orig := ce.Original
		b.Original = &orig
		b.ExistingFingerprint, b.RequestedFingerprint = ce.Existing, ce.Requested
	}
	var re *errs.RefusalError
	if errors.As(err, &re) {
		b.RetryAfterMS = ceilMillis(re.RetryAfter)
		if re.Anchor != "" {
			b.Anchor = re.Anchor
		}
		if re.MaxRecords > 0 {
			recs, bytes := re.InFlightRecords, re.InFlightBytes
			b.InFlightRecords, b.InFlightBytes = &recs, &bytes
			b.MaxRecords, b.MaxBytes = re.MaxRecords, re.MaxBytes
		}
	}
	var fe *engine.ForkError
	if errors.As(err, &fe) {
		b.Ours = &headJSON{Seq: fe.OurHead.Seq, Hash: fe.OurHead.Hash}
		b.Theirs = &headJSON{Seq: fe.TheirSeq, Hash: fe.TheirHd}
	}
	var ie *importError
	if errors.As(err, &ie) {
		b.Line = ie.line
		imported, dups := ie.imported, ie.duplicates
		b.Imported, b.Duplicates = &imported, &dups
	}
	var ge *ingestError
	if errors.As(err, &ge) {
		appended := ge.appended
		b.Appended = &appended
	}
	outboxErrorFields(err, &b)
	return errorJSONShape{Error: b}
}

// ceilMillis is d in whole milliseconds, rounded up: a retry hint printed
// short is one that is not enough, and one under a millisecond would print
// as 0 and (omitempty) not at all.
func ceilMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// messageOf is err's message without the "CODE reason: " the coded errors
// print, since the JSON shape (and errorLine) carries those separately
// (errs.Message: every code is dropped, however deep the coded cause).
func messageOf(err error) string { return errs.Message(err) }

// newlineRE matches a line break with the blanks around it.
var newlineRE = regexp.MustCompile(`[ \t]*\r?\n[ \t]*`)

// errorLine is the one-line human form: "STATE_002 conflict_detected: …".
func errorLine(err error) string {
	code := codeOf(err)
	// NB: a wrapped error may print on several lines (the merkle package's
	// root mismatch does); the human form stays one line.
	msg := newlineRE.ReplaceAllString(messageOf(err), " ")
	if msg == "" {
		return string(code) + " " + code.Reason()
	}
	return string(code) + " " + code.Reason() + ": " + msg
}
