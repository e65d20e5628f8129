package importer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/jsonobj"
	"github.com/anchordb/anchordb/segment"
)

// Parsing one import line: the native JSON shape and the anchor-local event
// shape of CONTRACT §10, each field checked, so a bad line is refused with its
// line number.

// Import line fields.
var (
	nativeFields = []string{"anchor", "type", "key", "value", "idempotency_key", "counter", "time"}
	eventMarkers = []string{"anchor_id", "event_type", "local_counter", "payload", "timestamp"}
)

// ParseLine parses one import line of either form and checks it against
// limits: the entry it appends, or an INPUT_001 error saying what is wrong
// with the line (Check and Import add its number).
func ParseLine(line []byte, limits segment.Limits) (engine.Entry, error) {
	m, err := readObject(line, "")
	if err != nil {
		return engine.Entry{}, err
	}
	var ent engine.Entry
	if isEventLine(m) {
		ent, err = parseEventLine(m)
	} else {
		ent, err = parseNativeLine(m)
	}
	if err != nil {
		return ent, err
	}
	if !utf8.Valid(line) {
		// Outside the fields read above (those name themselves): e.g. a
		// field name, or a payload that is not a string.
		return ent, errs.New(errs.CodeInvalidInput, `the line is not valid UTF-8 (write bytes as {"b64":"…"})`)
	}
	if _, given := present(m, "idempotency_key"); given && len(ent.IdempotencyKey) == 0 {
		return ent, errs.New(errs.CodeInvalidInput, `"idempotency_key" is empty: an idempotency key is 1..%d bytes (omit it for none)`, limits.MaxIdempotencyKey)
	}
	if err := segment.ValidateContent(ent.Anchor, ent.Type, ent.Key, ent.Value, ent.IdempotencyKey, limits); err != nil {
		return ent, err
	}
	if err := engine.CheckCallerCounter(ent.Counter, len(ent.IdempotencyKey) > 0); err != nil {
		return ent, err
	}
	return ent, nil
}

// readObject decodes data, which must be one JSON object and nothing after
// it, into its fields' raw values. A field that appears twice (also when
// spelled with escapes, as "k\u0065y" and "key") is refused rather than
// letting the last one win, as the policy and frontier parsers do. path
// names the enclosing field in messages ("" for the line itself).
func readObject(data []byte, path string) (map[string]json.RawMessage, error) {
	what := "not a JSON object"
	if path != "" {
		what = fmt.Sprintf("%q is not a JSON object", path)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	m := map[string]json.RawMessage{}
	err := jsonobj.Fields(dec, func(key string) error {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		m[key] = raw
		return nil
	})
	var notObject *jsonobj.NotObjectError
	var dup *jsonobj.DuplicateKeyError
	switch {
	case errors.As(err, &notObject):
		return nil, errs.New(errs.CodeInvalidInput, "%s", what)
	case errors.As(err, &dup):
		return nil, errs.New(errs.CodeInvalidInput, "field %q appears twice", path+dup.Key)
	case err != nil:
		return nil, errs.New(errs.CodeInvalidInput, "%s: %v", what, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errs.New(errs.CodeInvalidInput, "data after the JSON object")
	}
	return m, nil
}

func isEventLine(m map[string]json.RawMessage) bool {
	for _, f := range eventMarkers {
		if _, ok := m[f]; ok {
			return true
		}
	}
	return false
}

func parseNativeLine(m map[string]json.RawMessage) (engine.Entry, error) {
	var unknown []string
	for k := range m {
		if !contains(nativeFields, k) {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return engine.Entry{}, errs.New(errs.CodeInvalidInput, "unknown field %s (a line holds %s, or is an anchor-local event line with anchor_id, event_type, local_counter, payload, timestamp)",
			strings.Join(unknown, ", "), strings.Join(nativeFields, ", "))
	}
	var ent engine.Entry
	var err error
	if ent.Anchor, err = stringField(m, "anchor", true); err != nil {
		return ent, err
	}
	if ent.Type, err = stringField(m, "type", false); err != nil {
		return ent, err
	}
	if _, given := present(m, "type"); !given {
		ent.Type = segment.TypePut
	} else if ent.Type == "" {
		return ent, errs.New(errs.CodeInvalidInput, `"type" is empty: a type is 1..%d bytes (omit it for a put)`, segment.MaxType)
	}
	if ent.Key, err = bytesField(m, "key"); err != nil {
		return ent, err
	}
	if ent.Value, err = bytesField(m, "value"); err != nil {
		return ent, err
	}
	if ent.IdempotencyKey, err = bytesField(m, "idempotency_key"); err != nil {
		return ent, err
	}
	if ent.Counter, err = counterField(m, "counter"); err != nil {
		return ent, err
	}
	if ent.Time, err = timeField(m, "time"); err != nil {
		return ent, err
	}
	return ent, nil
}

func parseEventLine(m map[string]json.RawMessage) (engine.Entry, error) {
	var ent engine.Entry
	var err error
	for _, f := range []string{"anchor", "type", "value", "counter", "time"} {
		if _, ok := m[f]; ok {
			return ent, errs.New(errs.CodeInvalidInput, "field %q mixes the two line forms (an anchor-local event line has anchor_id, event_type, local_counter, payload, timestamp)", f)
		}
	}
	if ent.Anchor, err = stringField(m, "anchor_id", true); err != nil {
		return ent, err
	}
	if ent.Type, err = stringField(m, "event_type", true); err != nil {
		return ent, err
	}
	if ent.Counter, err = counterField(m, "local_counter"); err != nil {
		return ent, err
	}
	if raw, ok := m["payload"]; ok {
		s, isString, err := decodeString(raw, "payload")
		if err != nil {
			return ent, err
		}
		if isString {
			ent.Value = []byte(s)
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, raw); err != nil {
				return ent, errs.New(errs.CodeInvalidInput, "payload: %v", err)
			}
			ent.Value = buf.Bytes()
		}
	}
	if ent.Time, err = timeField(m, "timestamp"); err != nil {
		return ent, err
	}
	if ent.Key, err = bytesField(m, "key"); err != nil {
		return ent, err
	}
	if ent.IdempotencyKey, err = bytesField(m, "idempotency_key"); err != nil {
		return ent, err
	}
	return ent, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func present(m map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	raw, ok := m[name]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil, false
	}
	return raw, true
}

func stringField(m map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := present(m, name)
	if !ok {
		if required {
			return "", errs.New(errs.CodeInvalidInput, "missing %q", name)
		}
		return "", nil
	}
	s, isString, err := decodeString(raw, name)
	if err != nil {
		return "", err
	}
	if !isString {
		return "", errs.New(errs.CodeInvalidInput, "%q must be a JSON string", name)
	}
	return s, nil
}

// decodeString decodes raw when it is a JSON string (isString false when it
// is another JSON value), refusing what encoding/json would silently turn
// into U+FFFD: bytes that are not UTF-8, and a lone or unpaired surrogate
// escape such as "\ud800". The decoded string holds exactly as many U+FFFD
// as the token spells, literally or as \ufffd, or one was made up.
func decodeString(raw json.RawMessage, name string) (s string, isString bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", false, nil
	}
	if !utf8.Valid(raw) {
		return "", true, errs.New(errs.CodeInvalidInput, `%q is not valid UTF-8 (write bytes as {"b64":"…"})`, name)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", true, errs.New(errs.CodeInvalidInput, "%q is not a valid JSON string: %v", name, err)
	}
	if strings.Count(s, "\uFFFD") > jsonobj.SpelledReplacements(raw) {
		return "", true, errs.New(errs.CodeInvalidInput, `%q holds a lone or unpaired UTF-16 surrogate escape, which is not a character (write bytes as {"b64":"…"})`, name)
	}
	return s, true, nil
}

// bytesField reads a byte string: a JSON string (its UTF-8 bytes) or
// {"b64":"<standard base64>"}. Absent or null is nil.
func bytesField(m map[string]json.RawMessage, name string) ([]byte, error) {
	raw, ok := present(m, name)
	if !ok {
		return nil, nil
	}
	s, isString, err := decodeString(raw, name)
	if err != nil {
		return nil, err
	}
	if isString {
		return []byte(s), nil
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, errs.New(errs.CodeInvalidInput, `%q must be a JSON string or {"b64":"…"}`, name)
	}
	obj, err := readObject(raw, name+".")
	if err != nil {
		return nil, err
	}
	if len(obj) != 1 || obj["b64"] == nil {
		return nil, errs.New(errs.CodeInvalidInput, `%q must be a JSON string or {"b64":"…"}`, name)
	}
	// Not json.Unmarshal into a string: it takes null for "" without an
	// error, and {"b64":null} would be an empty value.
	b64, isString, err := decodeString(obj["b64"], name+".b64")
	if err != nil {
		return nil, err
	}
	if !isString {
		return nil, errs.New(errs.CodeInvalidInput, `%q: "b64" must be a JSON string`, name)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		return nil, errs.New(errs.CodeInvalidInput, "%q: not standard base64: %v", name, err)
	}
	return b, nil
}

// counterField reads a counter: an integer 1..MaxCounter (the line's check
// then applies engine.CheckCallerCounter). Absent or null is 0 (the
// database clock assigns one).
func counterField(m map[string]json.RawMessage, name string) (uint64, error) {
	raw, ok := present(m, name)
	if !ok {
		return 0, nil
	}
	c, err := strconv.ParseUint(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || c == 0 || c > engine.MaxCounter {
		return 0, errs.New(errs.CodeInvalidInput, "%q is %s: it must be an integer 1..%d (omit it to let the database clock assign one)",
			name, raw, uint64(engine.MaxCallerCounter))
	}
	return c, nil
}

// timeField reads an RFC 3339 time. Absent or null is the zero time (now).
func timeField(m map[string]json.RawMessage, name string) (time.Time, error) {
	s, err := stringField(m, name, false)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		// NB: not time.Parse's text, which names Go's layout string.
		return time.Time{}, errs.New(errs.CodeInvalidInput, "%q is %q: not an RFC 3339 time such as 2026-01-31T12:00:00.5Z", name, s)
	}
	if engine.CheckRecordTime(t) != nil {
		return time.Time{}, errs.New(errs.CodeInvalidInput, "%q %s is outside the years 1678..2262 a record time can hold", name, s)
	}
	return t, nil
}
