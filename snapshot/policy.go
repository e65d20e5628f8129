package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/jsonobj"
	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// Policy is a retention and compaction policy (CONTRACT §6). Its JSON shape,
// with every default:
//
//	{"version":"v1","snapshot":{"every_records":1000,"every_seconds":86400,"every_bytes":104857600},"keep_snapshots":3,"raw_log":"forever","verify_before_delete":true}
//
// A missing field takes its default. An unknown field at any level, a
// repeated field, a null, a value of the wrong type, a fraction or exponent
// where an integer belongs, or data after the object is INPUT_001, as is a
// value out of range (see Validate).
type Policy struct {
	Version  string   `json:"version"`
	Snapshot Triggers `json:"snapshot"`
	// KeepSnapshots is how many snapshots to keep, newest first (>= 1).
	KeepSnapshots int64 `json:"keep_snapshots"`
	// RawLog is RawLogForever (keep every sealed segment) or RawLogTruncate
	// (remove sealed segments wholly below the oldest kept snapshot).
	RawLog string `json:"raw_log"`
	// VerifyBeforeDelete makes only verified snapshots count as replacements
	// for what a compaction deletes.
	VerifyBeforeDelete bool `json:"verify_before_delete"`
}

// Triggers say when to take a snapshot; whichever fires first. Zero turns a
// trigger off.
type Triggers struct {
	EveryRecords int64 `json:"every_records"`
	EverySeconds int64 `json:"every_seconds"`
	EveryBytes   int64 `json:"every_bytes"`
}

// The values of Policy.RawLog and Policy.Version.
const (
	RawLogForever  = "forever"
	RawLogTruncate = "truncate"
	PolicyVersion  = "v1"
)

// maxEverySeconds keeps every_seconds convertible to a time.Duration.
const maxEverySeconds = math.MaxInt64 / int64(time.Second)

// DefaultPolicy returns the policy of CONTRACT §6 with every field at its default.
func DefaultPolicy() Policy {
	return Policy{
		Version:            PolicyVersion,
		Snapshot:           Triggers{EveryRecords: 1000, EverySeconds: 86400, EveryBytes: 104857600},
		KeepSnapshots:      3,
		RawLog:             RawLogForever,
		VerifyBeforeDelete: true,
	}
}

// Validate checks the values: version "v1", non-negative triggers (and
// every_seconds within a time.Duration), keep_snapshots >= 1, raw_log
// "forever" or "truncate". Errors are INPUT_001 naming the field.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return errs.New(errs.CodeInvalidInput, "policy: "+format, args...)
	}
	switch {
	case p.Version != PolicyVersion:
		return bad("version %q is not supported (want %q)", p.Version, PolicyVersion)
	case p.Snapshot.EveryRecords < 0:
		return bad("snapshot.every_records is %d (must be >= 0; 0 turns it off)", p.Snapshot.EveryRecords)
	case p.Snapshot.EverySeconds < 0 || p.Snapshot.EverySeconds > maxEverySeconds:
		return bad("snapshot.every_seconds is %d (must be 0..%d; 0 turns it off)", p.Snapshot.EverySeconds, maxEverySeconds)
	case p.Snapshot.EveryBytes < 0:
		return bad("snapshot.every_bytes is %d (must be >= 0; 0 turns it off)", p.Snapshot.EveryBytes)
	case p.KeepSnapshots < 1:
		return bad("keep_snapshots is %d (must be >= 1)", p.KeepSnapshots)
	case p.RawLog != RawLogForever && p.RawLog != RawLogTruncate:
		return bad("raw_log is %q (must be %q or %q)", p.RawLog, RawLogForever, RawLogTruncate)
	}
	return nil
}

// Canonical returns the canonical form: every field present, in the order
// of the shape above, no whitespace. Two policies are the same policy exactly
// when their canonical forms are equal.
func (p Policy) Canonical() []byte {
	b := make([]byte, 0, 192)
	b = append(b, `{"version":`...)
	b = appendJSONString(b, p.Version)
	b = append(b, `,"snapshot":{"every_records":`...)
	b = strconv.AppendInt(b, p.Snapshot.EveryRecords, 10)
	b = append(b, `,"every_seconds":`...)
	b = strconv.AppendInt(b, p.Snapshot.EverySeconds, 10)
	b = append(b, `,"every_bytes":`...)
	b = strconv.AppendInt(b, p.Snapshot.EveryBytes, 10)
	b = append(b, `},"keep_snapshots":`...)
	b = strconv.AppendInt(b, p.KeepSnapshots, 10)
	b = append(b, `,"raw_log":`...)
	b = appendJSONString(b, p.RawLog)
	b = append(b, `,"verify_before_delete":`...)
	b = strconv.AppendBool(b, p.VerifyBeforeDelete)
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// PolicyRef returns "blake3:" and the hex of plain BLAKE3-256 over the
// canonical form.
func (p Policy) PolicyRef() string {
	return segment.Hash(blake3.Sum256(p.Canonical())).String()
}

// SnapshotInterval returns every_seconds as a duration (0: off).
func (p Policy) SnapshotInterval() time.Duration {
	return time.Duration(p.Snapshot.EverySeconds) * time.Second
}

// MarshalJSON returns the canonical form.
func (p Policy) MarshalJSON() ([]byte, error) { return p.Canonical(), nil }

// UnmarshalJSON parses like ParsePolicy.
func (p *Policy) UnmarshalJSON(b []byte) error {
	q, err := ParsePolicy(b)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// ParsePolicy parses and validates a policy document. Errors are INPUT_001
// and name the offending field by its dotted path.
func ParsePolicy(data []byte) (Policy, error) {
	p := DefaultPolicy()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	r := jsonobj.Reader{Dec: dec, What: "policy"}
	err := r.Object("", func(key string) error {
		var err error
		switch key {
		case "version":
			p.Version, err = r.String(key)
		case "snapshot":
			err = r.Object("snapshot.", func(key string) error {
				var err error
				switch key {
				case "every_records":
					p.Snapshot.EveryRecords, err = r.Int("snapshot." + key)
				case "every_seconds":
					p.Snapshot.EverySeconds, err = r.Int("snapshot." + key)
				case "every_bytes":
					p.Snapshot.EveryBytes, err = r.Int("snapshot." + key)
				default:
					err = r.UnknownField("snapshot." + key)
				}
				return err
			})
		case "keep_snapshots":
			p.KeepSnapshots, err = r.Int(key)
		case "raw_log":
			p.RawLog, err = r.String(key)
		case "verify_before_delete":
			p.VerifyBeforeDelete, err = r.Bool(key)
		default:
			err = r.UnknownField(key)
		}
		return err
	})
	if err != nil {
		return Policy{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Policy{}, errs.New(errs.CodeInvalidInput, "policy: data after the policy object")
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}
