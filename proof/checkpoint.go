package proof

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// Origin line parts: "anchordb/<db id>/blake3".
const (
	originPrefix = "anchordb/"
	originSuffix = "/blake3"
)

// Line labels of the checkpoint body.
const (
	labelAnchors = "anchors "
	labelRecords = "records "
	labelRoot    = "root "
	labelTime    = "time "
	labelAnchor  = "anchor "
	headerLines  = 5 // origin, anchors, records, root, time
)

// Checkpoint is the body of a signed checkpoint (CONTRACT §5): the frontier
// commitment of a database at one moment. A valid checkpoint (see Validate)
// has Entries sorted by anchor id as raw bytes without duplicates,
// Anchors == len(Entries), Records == the sum of the entry sizes, and Root ==
// FrontierRoot(Entries).
type Checkpoint struct {
	Origin  string       // "anchordb/<db id>/blake3"; see CheckpointOrigin
	Anchors uint64       // number of anchors (frontier tree size)
	Records uint64       // total records over all anchors
	Root    segment.Hash // frontier root
	Time    time.Time    // when it was taken; written in UTC
	Entries []Entry      // one per anchor, sorted by anchor id bytes
}

// CheckpointOrigin returns the origin line of database dbID:
// "anchordb/" + dbID + "/blake3". dbID must be non-empty UTF-8 without
// spaces or control characters (Validate checks the result).
func CheckpointOrigin(dbID string) string { return originPrefix + dbID + originSuffix }

// NewCheckpoint returns the valid checkpoint of database dbID at time t over
// entries, which it copies and sorts; it computes Anchors, Records and Root.
// Invalid ids or origin, duplicate anchors, a size-0 entry whose root is not
// BLAKE3(""), a record count beyond 2^64-1 or a time outside years 0–9999
// are INPUT_001.
func NewCheckpoint(dbID string, t time.Time, entries []Entry) (*Checkpoint, error) {
	c := &Checkpoint{Origin: CheckpointOrigin(dbID), Time: t.UTC(), Entries: slices.Clone(entries)}
	if c.Entries == nil {
		c.Entries = []Entry{}
	}
	SortEntries(c.Entries)
	if err := ValidateEntries(c.Entries); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	records, err := sumSizes(c.Entries)
	if err != nil {
		return nil, err
	}
	root, err := FrontierRoot(c.Entries)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c.Anchors, c.Records, c.Root = uint64(len(c.Entries)), records, root
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func sumSizes(entries []Entry) (uint64, error) {
	var total uint64
	for _, e := range entries {
		var carry uint64
		total, carry = bits.Add64(total, e.Size, 0)
		if carry != 0 {
			return 0, errs.New(errs.CodeInvalidInput, "checkpoint: total records overflow 64 bits at anchor %q", e.Anchor)
		}
	}
	return total, nil
}

// Validate checks the invariants listed on Checkpoint and that Origin and
// Time can be written. A root that does not match the entries is INT_001;
// everything else is INPUT_001.
func (c *Checkpoint) Validate() error {
	if c == nil {
		return errs.New(errs.CodeInvalidInput, "no checkpoint")
	}
	if err := validateOrigin(c.Origin); err != nil {
		return err
	}
	if y := c.Time.UTC().Year(); y < 0 || y > 9999 {
		return errs.New(errs.CodeInvalidInput, "checkpoint time %s is outside RFC 3339 years 0000–9999", c.Time)
	}
	if err := ValidateEntries(c.Entries); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if c.Anchors != uint64(len(c.Entries)) {
		return errs.New(errs.CodeInvalidInput, "checkpoint says %d anchors but lists %d", c.Anchors, len(c.Entries))
	}
	records, err := sumSizes(c.Entries)
	if err != nil {
		return err
	}
	if c.Records != records {
		return errs.New(errs.CodeInvalidInput, "checkpoint says %d records but its anchors hold %d", c.Records, records)
	}
	root, err := FrontierRoot(c.Entries)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if root != c.Root {
		return errs.New(errs.CodeHashMismatch, "checkpoint root %s is not the frontier root %s of its %d anchors", c.Root, root, len(c.Entries))
	}
	return nil
}

func validateOrigin(origin string) error {
	id, ok := strings.CutPrefix(origin, originPrefix)
	if ok {
		id, ok = strings.CutSuffix(id, originSuffix)
	}
	if !ok || id == "" {
		return errs.New(errs.CodeInvalidInput, "checkpoint origin %q is not of the form %s<db id>%s", origin, originPrefix, originSuffix)
	}
	if !utf8.ValidString(id) || strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return errs.New(errs.CodeInvalidInput, "checkpoint origin %q: the db id must be UTF-8 without spaces or control characters", origin)
	}
	return nil
}

// Marshal returns the checkpoint body, the text that gets signed. Byte by
// byte (every line ends in one '\n', 0x0A; no blank lines; decimals are
// ASCII without sign or leading zeros; hashes are "blake3:" + 64 lowercase
// hex):
//
//	anchordb/<db id>/blake3                          origin line
//	anchors <decimal>                                number of anchors N
//	records <decimal>                                total records, the sum of the sizes
//	root blake3:<hex>                                frontier root (FrontierRoot)
//	time <RFC 3339>                                  UTC, "Z", Go's RFC3339Nano (fraction without trailing zeros)
//	anchor <JSON string> <decimal size> blake3:<hex> × N, sorted by anchor id raw bytes
//
// The anchor id is a JSON string (RFC 8259) as encoding/json writes it with
// HTML escaping off: '"' and '\' are escaped as \" and \\, U+2028 and
// U+2029 as \u2028 and \u2029, and every other character of a valid id
// (which has no control characters) is written as its raw UTF-8. So an id
// with spaces or quotes stays on one line and is read back exactly.
//
// Precondition: c.Validate() == nil (NewCheckpoint guarantees it). Marshal
// of an invalid checkpoint still returns bytes (nil for a nil c), but
// ParseCheckpointBody and Sign refuse them.
func (c *Checkpoint) Marshal() []byte {
	if c == nil {
		return nil
	}
	var b bytes.Buffer
	b.Grow(256 + len(c.Entries)*(24+2*segment.HashSize+16))
	b.WriteString(c.Origin)
	b.WriteString("\n" + labelAnchors)
	b.WriteString(strconv.FormatUint(c.Anchors, 10))
	b.WriteString("\n" + labelRecords)
	b.WriteString(strconv.FormatUint(c.Records, 10))
	b.WriteString("\n" + labelRoot)
	b.WriteString(c.Root.String())
	b.WriteString("\n" + labelTime)
	b.WriteString(c.Time.UTC().Format(time.RFC3339Nano))
	b.WriteByte('\n')
	for _, e := range c.Entries {
		b.WriteString(labelAnchor)
		b.Write(quoteID(e.Anchor))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(e.Size, 10))
		b.WriteByte(' ')
		b.WriteString(e.Root.String())
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// quoteID writes id as a JSON string without HTML escaping.
func quoteID(id string) []byte {
	q, err := marshal(id)
	if err != nil { // NB: encoding a string cannot fail.
		return []byte(strconv.Quote(id))
	}
	return q
}

// ParseCheckpointBody parses a checkpoint body in the form Marshal writes
// and checks it with Validate. It accepts only that canonical form: any
// other spelling of the same content is INPUT_001, so one checkpoint has one
// body and one signature. A malformed body is INPUT_001; a root that does
// not match the listed anchors is INT_001.
func ParseCheckpointBody(body []byte) (*Checkpoint, error) {
	if len(body) == 0 || body[len(body)-1] != '\n' {
		return nil, errs.New(errs.CodeInvalidInput, "checkpoint body does not end in a newline")
	}
	if !utf8.Valid(body) {
		return nil, errs.New(errs.CodeInvalidInput, "checkpoint body is not valid UTF-8")
	}
	lines := strings.Split(string(body[:len(body)-1]), "\n")
	if len(lines) < headerLines {
		return nil, errs.New(errs.CodeInvalidInput, "checkpoint body has %d lines, want at least %d", len(lines), headerLines)
	}
	c := &Checkpoint{Origin: lines[0]}
	if err := validateOrigin(c.Origin); err != nil {
		return nil, err
	}
	var err error
	if c.Anchors, err = parseLabeledUint(lines[1], labelAnchors, 2); err != nil {
		return nil, err
	}
	if c.Records, err = parseLabeledUint(lines[2], labelRecords, 3); err != nil {
		return nil, err
	}
	rest, ok := strings.CutPrefix(lines[3], labelRoot)
	if !ok {
		return nil, errs.New(errs.CodeInvalidInput, "checkpoint line 4 does not start with %q", labelRoot)
	}
	if c.Root, err = segment.ParseHash(rest); err != nil {
		return nil, fmt.Errorf("checkpoint line 4: %w", err)
	}
	rest, ok = strings.CutPrefix(lines[4], labelTime)
	if !ok {
		return nil, errs.New(errs.CodeInvalidInput, "checkpoint line 5 does not start with %q", labelTime)
	}
	if c.Time, err = time.Parse(time.RFC3339Nano, rest); err != nil {
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "checkpoint line 5: time")
	}
	c.Time = c.Time.UTC()
	entryLines := lines[headerLines:]
	if c.Anchors != uint64(len(entryLines)) {
		return nil, errs.New(errs.CodeInvalidInput, "checkpoint says %d anchors but has %d anchor lines", c.Anchors, len(entryLines))
	}
	c.Entries = make([]Entry, len(entryLines))
	for i, line := range entryLines {
		if c.Entries[i], err = parseEntryLine(line); err != nil {
			return nil, fmt.Errorf("checkpoint line %d: %w", headerLines+1+i, err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !bytes.Equal(c.Marshal(), body) {
		return nil, errs.New(errs.CodeInvalidInput, "checkpoint body is not in canonical form (numbers, time or anchor ids spelled differently from what Marshal writes)")
	}
	return c, nil
}

func parseLabeledUint(line, label string, lineNo int) (uint64, error) {
	rest, ok := strings.CutPrefix(line, label)
	if !ok {
		return 0, errs.New(errs.CodeInvalidInput, "checkpoint line %d does not start with %q", lineNo, label)
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return 0, errs.Wrap(errs.CodeInvalidInput, err, "checkpoint line %d", lineNo)
	}
	return n, nil
}

// parseEntryLine parses `anchor <JSON string> <size> blake3:<hex>`.
func parseEntryLine(line string) (Entry, error) {
	var e Entry
	rest, ok := strings.CutPrefix(line, labelAnchor)
	if !ok || !strings.HasPrefix(rest, `"`) {
		return e, errs.New(errs.CodeInvalidInput, "anchor line does not start with %q followed by a JSON string", labelAnchor)
	}
	end := closingQuote(rest)
	if end < 0 {
		return e, errs.New(errs.CodeInvalidInput, "anchor id string is not terminated")
	}
	if err := json.Unmarshal([]byte(rest[:end+1]), &e.Anchor); err != nil {
		return e, errs.Wrap(errs.CodeInvalidInput, err, "anchor id")
	}
	fields := strings.Split(rest[end+1:], " ")
	if len(fields) != 3 || fields[0] != "" {
		return e, errs.New(errs.CodeInvalidInput, "anchor %q: want \" <size> <root>\" after the id", e.Anchor)
	}
	var err error
	if e.Size, err = strconv.ParseUint(fields[1], 10, 64); err != nil {
		return e, errs.Wrap(errs.CodeInvalidInput, err, "anchor %q size", e.Anchor)
	}
	if e.Root, err = segment.ParseHash(fields[2]); err != nil {
		return e, fmt.Errorf("anchor %q root: %w", e.Anchor, err)
	}
	return e, nil
}

// closingQuote returns the index of the '"' that ends the JSON string
// starting at s[0], or -1.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// Entry returns the entry of anchor, if the checkpoint lists it.
func (c *Checkpoint) Entry(anchor string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(c.Entries, anchor, func(e Entry, a string) int { return strings.Compare(e.Anchor, a) })
	if !ok {
		return Entry{}, false
	}
	return c.Entries[i], true
}

// ProveAnchor returns the proof that anchor's entry is in the checkpoint's
// frontier root, with Origin set. Preconditions: c.Validate() == nil; the
// anchor is listed (STATE_003 otherwise).
func (c *Checkpoint) ProveAnchor(anchor string) (*FrontierProof, error) {
	p, err := ProveFrontier(c.Entries, anchor)
	if err != nil {
		return nil, err
	}
	if p.Root != c.Root {
		return nil, errs.New(errs.CodeHashMismatch, "checkpoint root %s is not the frontier root %s of its anchors", c.Root, p.Root)
	}
	p.Origin = c.Origin
	return p, nil
}

// VerifyAnchorProof checks p with VerifyFrontierProof and that it proves
// against this checkpoint (Bind): the same frontier root and number of
// anchors, for the entry the checkpoint lists (INT_001 otherwise). c should come from OpenCheckpoint, so that its root is
// signed.
func (c *Checkpoint) VerifyAnchorProof(p *FrontierProof) error {
	if err := VerifyFrontierProof(p); err != nil {
		return err
	}
	return c.Bind(Verified{Kind: KindFrontier, Frontier: p})
}
