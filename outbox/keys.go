package outbox

import (
	"encoding/binary"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// AnchorPrefix starts the anchor id of every outbox: outbox NAME keeps its
// records on the anchor "outbox/NAME". Tools (the CLI's verify) take every
// anchor with this prefix for an outbox.
const AnchorPrefix = "outbox/"

// KeyPrefix starts every key an outbox writes. Keys are one namespace across
// anchors, so this prefix is reserved: a record of another anchor under it
// is a finding of Verify.
const KeyPrefix = "\x00outbox\x00"

// Limits of the outbox (docs/OUTBOX.md). Anything over them is INPUT_001.
const (
	MaxNameBytes        = 200     // an outbox name
	MaxIDBytes          = 256     // an entry id
	MaxDestinationBytes = 1024    // Message.Destination
	MaxHeaders          = 64      // Message.Headers entries
	MaxHeaderNameBytes  = 256     // one header's name
	MaxHeaderValueBytes = 4096    // one header's value
	MaxWorkerBytes      = 256     // a worker or operator name
	MaxErrorBytes       = 4096    // a failure message is cut to this
	MaxClaim            = 1000    // entries one Claim may take
	DefaultMaxPayload   = 1 << 20 // Options.MaxPayload when zero
	// MaxLeaseTTL bounds a lease's time to live.
	MaxLeaseTTL = 7 * 24 * time.Hour
)

// Row kinds: the byte after an outbox's key prefix.
const (
	kindEntry = 'e' // e ‖ id: the entry's state, one version per transition
	kindReady = 'r' // r ‖ time ‖ enqueue seq ‖ id: a pending entry, by next_attempt_at
	kindLease = 'l' // l ‖ time ‖ enqueue seq ‖ id: an inflight entry, by lease expiry
	kindDead  = 'd' // d ‖ time ‖ enqueue seq ‖ id: a dead entry, by dead_at
	kindMark  = 'w' // w: the watermark the r, l and d rows stand at, with the counts there
)

// keys builds the keys of one outbox.
type keys struct {
	prefix []byte // KeyPrefix ‖ name ‖ 0x00
}

func newKeys(name string) keys {
	p := make([]byte, 0, len(KeyPrefix)+len(name)+1)
	p = append(p, KeyPrefix...)
	p = append(p, name...)
	return keys{prefix: append(p, 0)}
}

func (k keys) kind(c byte) []byte {
	b := make([]byte, len(k.prefix)+1, len(k.prefix)+64)
	copy(b, k.prefix)
	b[len(k.prefix)] = c
	return b
}

func (k keys) entry(id string) []byte { return append(k.kind(kindEntry), id...) }
func (k keys) mark() []byte           { return k.kind(kindMark) }

// row is the index row key of kind c for an entry: kind, the time (Unix
// nanoseconds, sign bit flipped so that the bytes sort as the times do),
// the enqueue seq and the id, all big-endian.
func (k keys) row(c byte, at int64, enqSeq uint64, id string) []byte {
	b := k.kind(c)
	b = binary.BigEndian.AppendUint64(b, uint64(at)^(1<<63))
	b = binary.BigEndian.AppendUint64(b, enqSeq)
	return append(b, id...)
}

// rowsUpTo is the exclusive upper bound of the rows of kind c with a time
// at or before at.
func (k keys) rowsUpTo(c byte, at int64) []byte {
	b := k.kind(c)
	if at == 1<<63-1 {
		b[len(b)-1]++
		return b
	}
	return binary.BigEndian.AppendUint64(b, uint64(at+1)^(1<<63))
}

// kindEnd is the exclusive upper bound of every row of kind c.
func (k keys) kindEnd(c byte) []byte { return k.kind(c + 1) }

// end is the exclusive upper bound of every key of the outbox.
func (k keys) end() []byte {
	b := append([]byte(nil), k.prefix...)
	b[len(b)-1]++
	return b
}

// parseRow splits a row key of kind c into its time, enqueue seq and id.
func (k keys) parseRow(c byte, key []byte) (at int64, enqSeq uint64, id string, ok bool) {
	n := len(k.prefix) + 1
	if len(key) < n+16+1 || string(key[:len(k.prefix)]) != string(k.prefix) || key[len(k.prefix)] != c {
		return 0, 0, "", false
	}
	at = int64(binary.BigEndian.Uint64(key[n:]) ^ (1 << 63))
	enqSeq = binary.BigEndian.Uint64(key[n+8:])
	return at, enqSeq, string(key[n+16:]), true
}

// parseEntryKey returns the id of an entry key.
func (k keys) parseEntryKey(key []byte) (string, bool) {
	n := len(k.prefix) + 1
	if len(key) <= n || string(key[:len(k.prefix)]) != string(k.prefix) || key[len(k.prefix)] != kindEntry {
		return "", false
	}
	return string(key[n:]), true
}

// ValidateName checks an outbox name: 1..MaxNameBytes of UTF-8 without
// control characters (so that "outbox/NAME" is a valid anchor id).
func ValidateName(name string) error {
	if err := checkText("outbox name", name, MaxNameBytes); err != nil {
		return err
	}
	return segment.ValidateAnchorID(AnchorPrefix + name)
}

// ValidateID checks an entry id: 1..MaxIDBytes of UTF-8 without control
// characters.
func ValidateID(id string) error { return checkText("entry id", id, MaxIDBytes) }

// checkText refuses an empty string, one over max bytes, invalid UTF-8 and
// control characters, naming what it is.
func checkText(what, s string, max int) error {
	if s == "" {
		return errs.New(errs.CodeInvalidInput, "%s is empty (must be 1..%d bytes)", what, max)
	}
	if len(s) > max {
		return errs.New(errs.CodeInvalidInput, "%s is %d bytes, over the limit of %d", what, len(s), max)
	}
	return checkPrintable(what, s)
}

// checkPrintable refuses invalid UTF-8 and control characters.
func checkPrintable(what, s string) error {
	if !utf8.ValidString(s) {
		return errs.New(errs.CodeInvalidInput, "%s %q is not valid UTF-8", what, s)
	}
	if i := strings.IndexFunc(s, isControl); i >= 0 {
		return errs.New(errs.CodeInvalidInput, "%s %q has a control character at byte %d", what, s, i)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }
