package fuzz

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/tool/importer"
)

// FuzzImportLine: any bytes as one line of `anchordb import`
// (importer.ParseLine). Never panic;
// a refusal is INPUT_001; an accepted line yields an entry the engine's own
// validation accepts, and re-encoded as a native line (bytes as {"b64"})
// it parses to the same entry.
func FuzzImportLine(f *testing.F) {
	f.Add([]byte(`{"anchor":"imp","type":"put","key":"a","value":"1"}`))
	f.Add([]byte(`{"anchor":"imp","type":"put","key":"b","value":{"b64":"AAE="},"idempotency_key":"op-1","counter":7}`))
	f.Add([]byte(`{"anchor":"imp","type":"delete","key":"a"}`))
	f.Add([]byte(`{"anchor_id":"dev-9","local_counter":3,"event_type":"TELEMETRY_UPDATE","payload":{"t":21.5},"timestamp":"2026-01-31T12:00:00Z"}`))
	f.Add([]byte(`{"anchor":"../x","type":"put","key":"k","value":"v"}`))
	f.Add([]byte(`{"anchor":"a","counter":0}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"anchor":"u\ud800","key":"\ufffd","value":"\ud83d\ude00"}`))
	f.Add([]byte("{\"anchor\":\"u\xff\",\"key\":\"k\"}"))
	limits := segment.DefaultLimits()
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := importer.ParseLine(line, limits)
		if err != nil {
			if errs.CodeOf(err) != errs.CodeInvalidInput {
				t.Fatalf("refused with %v (code %q)", err, errs.CodeOf(err))
			}
			return
		}
		if !utf8.Valid(line) {
			t.Fatalf("accepted a line that is not valid UTF-8")
		}
		if err := segment.ValidateContent(e.Anchor, e.Type, e.Key, e.Value, e.IdempotencyKey, limits); err != nil {
			t.Fatalf("accepted an entry the engine refuses: %v", err)
		}
		if engine.CheckCallerCounter(e.Counter, len(e.IdempotencyKey) > 0) != nil {
			t.Fatalf("accepted counter %d", e.Counter)
		}
		native := map[string]any{"anchor": e.Anchor, "type": e.Type}
		for name, b := range map[string][]byte{"key": e.Key, "value": e.Value, "idempotency_key": e.IdempotencyKey} {
			if b != nil {
				native[name] = map[string]string{"b64": base64.StdEncoding.EncodeToString(b)}
			}
		}
		if e.Counter != 0 {
			native["counter"] = e.Counter
		}
		if !e.Time.IsZero() {
			native["time"] = e.Time.UTC().Format(time.RFC3339Nano)
		}
		again, _ := json.Marshal(native)
		e2, err := importer.ParseLine(again, limits)
		if err != nil {
			t.Fatalf("re-encoded line %s: %v", again, err)
		}
		if e2.Anchor != e.Anchor || e2.Type != e.Type || !bytes.Equal(e2.Key, e.Key) || !bytes.Equal(e2.Value, e.Value) ||
			!bytes.Equal(e2.IdempotencyKey, e.IdempotencyKey) || e2.Counter != e.Counter || !e2.Time.Equal(e.Time) {
			t.Fatalf("round trip of %s:\n got %+v\nwant %+v", again, e2, e)
		}
	})
}
