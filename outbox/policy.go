package outbox

import (
	"bytes"
	"encoding/binary"
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

// Policy is a retry policy: how many attempts an entry gets and how long it
// waits between them. Like the retention policy it is data, versioned and
// content-addressed: its PolicyRef is "blake3:" of its canonical form, and
// every failure record names the policy_ref it was scheduled under. Its
// JSON shape, with every default:
//
//	{"version":"v1","max_attempts":8,"backoff":{"base_ms":1000,"multiplier":2,"cap_ms":3600000},"jitter":0.2}
//
// A missing field takes its default. An unknown field at any level, a
// repeated field, a null, a value of the wrong type or out of range, or data
// after the object is INPUT_001 (see Validate).
//
// After the failure of attempt n (n = 1, 2, …), an entry with attempts left
// waits min(cap, base·multiplier^(n−1)) less a jitter of up to that delay
// times the jitter fraction. The jitter is drawn from BLAKE3 of the entry id
// and n, so replaying the log yields the same schedule.
type Policy struct {
	Version string `json:"version"`
	// MaxAttempts is how many claims an entry gets (>= 1): the failure of
	// the last one, or its lease running out, makes it dead.
	MaxAttempts int64   `json:"max_attempts"`
	Backoff     Backoff `json:"backoff"`
	// Jitter is the fraction (0..1) of each delay that may be taken off it.
	Jitter float64 `json:"jitter"`
}

// Backoff is the exponential backoff of a Policy.
type Backoff struct {
	BaseMS     int64   `json:"base_ms"`    // the first delay (0..cap_ms)
	Multiplier float64 `json:"multiplier"` // each next delay's factor (1..1000)
	CapMS      int64   `json:"cap_ms"`     // the longest delay (0..MaxPolicyDelay)
}

// PolicyVersion is the only Policy version.
const PolicyVersion = "v1"

// Bounds of a Policy.
const (
	MaxPolicyAttempts = 1_000_000
	MaxPolicyDelayMS  = int64(365 * 24 * time.Hour / time.Millisecond)
	maxMultiplier     = 1000
)

// DefaultPolicy returns the policy with every field at its default.
func DefaultPolicy() Policy {
	return Policy{Version: PolicyVersion, MaxAttempts: 8,
		Backoff: Backoff{BaseMS: 1000, Multiplier: 2, CapMS: 3_600_000}, Jitter: 0.2}
}

// Validate checks the values. Errors are INPUT_001 naming the field.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return errs.New(errs.CodeInvalidInput, "retry policy: "+format, args...)
	}
	switch {
	case p.Version != PolicyVersion:
		return bad("version %q is not supported (want %q)", p.Version, PolicyVersion)
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxPolicyAttempts:
		return bad("max_attempts is %d (must be 1..%d)", p.MaxAttempts, MaxPolicyAttempts)
	case p.Backoff.CapMS < 0 || p.Backoff.CapMS > MaxPolicyDelayMS:
		return bad("backoff.cap_ms is %d (must be 0..%d)", p.Backoff.CapMS, MaxPolicyDelayMS)
	case p.Backoff.BaseMS < 0 || p.Backoff.BaseMS > p.Backoff.CapMS:
		return bad("backoff.base_ms is %d (must be 0..cap_ms, %d)", p.Backoff.BaseMS, p.Backoff.CapMS)
	case !(p.Backoff.Multiplier >= 1 && p.Backoff.Multiplier <= maxMultiplier):
		return bad("backoff.multiplier is %v (must be 1..%d)", p.Backoff.Multiplier, maxMultiplier)
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return bad("jitter is %v (must be 0..1)", p.Jitter)
	}
	return nil
}

// Canonical returns the canonical form: every field present, in the order
// of the shape above, no whitespace, numbers in their shortest decimal
// form. Two policies are the same policy exactly when their canonical
// forms are equal.
func (p Policy) Canonical() []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"version":`...)
	q, _ := json.Marshal(p.Version)
	b = append(b, q...)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, p.MaxAttempts, 10)
	b = append(b, `,"backoff":{"base_ms":`...)
	b = strconv.AppendInt(b, p.Backoff.BaseMS, 10)
	b = append(b, `,"multiplier":`...)
	b = strconv.AppendFloat(b, p.Backoff.Multiplier, 'f', -1, 64)
	b = append(b, `,"cap_ms":`...)
	b = strconv.AppendInt(b, p.Backoff.CapMS, 10)
	b = append(b, `},"jitter":`...)
	b = strconv.AppendFloat(b, p.Jitter, 'f', -1, 64)
	return append(b, '}')
}

// PolicyRef returns "blake3:" and the hex of plain BLAKE3-256 over the
// canonical form.
func (p Policy) PolicyRef() string {
	return segment.Hash(blake3.Sum256(p.Canonical())).String()
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

// jitterContext separates the jitter draws from every other BLAKE3.
const jitterContext = "anchordb 2026-11 outbox jitter v1"

var jitterBase = blake3.NewDeriveKey(jitterContext)

// Delay is how long an entry waits after the failure of attempt (1, 2, …):
// min(cap, base·multiplier^(attempt−1)), less jitter·that·u, where u in
// [0, 1) comes from BLAKE3 of id and attempt.
func (p Policy) Delay(id string, attempt int) time.Duration {
	d := float64(p.Backoff.BaseMS)
	cap := float64(p.Backoff.CapMS)
	for i := 1; i < attempt && d < cap; i++ {
		d *= p.Backoff.Multiplier
	}
	d = math.Min(d, cap)
	if p.Jitter > 0 && d > 0 {
		h := jitterBase.Clone()
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(attempt))
		_, _ = h.Write(n[:])
		_, _ = h.Write([]byte(id))
		var sum [8]byte
		h.Sum(sum[:0])
		u := float64(binary.BigEndian.Uint64(sum[:])>>11) / (1 << 53) // [0, 1)
		d -= d * p.Jitter * u
	}
	return time.Duration(d * float64(time.Millisecond))
}

// ParsePolicy parses and validates a retry policy document. Errors are
// INPUT_001 and name the offending field by its dotted path.
func ParsePolicy(data []byte) (Policy, error) {
	p := DefaultPolicy()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	r := jsonobj.Reader{Dec: dec, What: "retry policy"}
	err := r.Object("", func(key string) error {
		var err error
		switch key {
		case "version":
			p.Version, err = r.String(key)
		case "max_attempts":
			p.MaxAttempts, err = r.Int(key)
		case "backoff":
			err = r.Object("backoff.", func(key string) error {
				var err error
				switch key {
				case "base_ms":
					p.Backoff.BaseMS, err = r.Int("backoff." + key)
				case "multiplier":
					p.Backoff.Multiplier, err = r.Float("backoff." + key)
				case "cap_ms":
					p.Backoff.CapMS, err = r.Int("backoff." + key)
				default:
					err = r.UnknownField("backoff." + key)
				}
				return err
			})
		case "jitter":
			p.Jitter, err = r.Float(key)
		default:
			err = r.UnknownField(key)
		}
		return err
	})
	if err != nil {
		return Policy{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Policy{}, errs.New(errs.CodeInvalidInput, "retry policy: data after the policy object")
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}
