package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
)

// head is the outbox anchor's last seq: what a refusal must leave alone.
func head(t *testing.T, db *engine.DB) uint64 {
	t.Helper()
	info, _, err := db.AnchorInfo(context.Background(), "outbox/billing")
	if err != nil {
		t.Fatal(err)
	}
	return info.Records
}

// TestBadInputIsRefusedWhole: every refusal is a typed error with its code
// (engine.CodeOf reads it) and nothing is written.
func TestBadInputIsRefusedWhole(t *testing.T) {
	ctx := context.Background()
	ob, db, _ := testOutbox(t, Options{MaxPayload: 1024})
	if _, err := ob.Enqueue(ctx, Message{ID: "done-1", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, Message{ID: "pending-1", Payload: []byte("x"), NotBefore: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	cs, err := ob.Claim(ctx, "w", 1, time.Minute)
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	if _, err := ob.Complete(ctx, *cs[0].Lease, nil); err != nil {
		t.Fatal(err)
	}
	doneLease := *cs[0].Lease
	before := head(t, db)

	cases := []struct {
		name string
		code engine.Code
		call func() error
	}{
		{"oversize id", "INPUT_001", func() error {
			_, err := ob.Enqueue(ctx, Message{ID: strings.Repeat("x", MaxIDBytes+1)})
			return err
		}},
		{"empty id", "INPUT_001", func() error { _, err := ob.Enqueue(ctx, Message{ID: ""}); return err }},
		{"id with a control character", "INPUT_001", func() error { _, err := ob.Enqueue(ctx, Message{ID: "a\nb"}); return err }},
		{"id not UTF-8", "INPUT_001", func() error { _, err := ob.Enqueue(ctx, Message{ID: "a\xffb"}); return err }},
		{"oversize payload", "INPUT_001", func() error {
			_, err := ob.Enqueue(ctx, Message{ID: "big", Payload: make([]byte, 1025)})
			return err
		}},
		{"too many headers", "INPUT_001", func() error {
			h := map[string]string{}
			for i := 0; i <= MaxHeaders; i++ {
				h[strings.Repeat("h", i+1)] = "v"
			}
			_, err := ob.Enqueue(ctx, Message{ID: "hdr", Headers: h})
			return err
		}},
		{"oversize destination", "INPUT_001", func() error {
			_, err := ob.Enqueue(ctx, Message{ID: "dst", Destination: strings.Repeat("d", MaxDestinationBytes+1)})
			return err
		}},
		{"a batch with one bad message", "INPUT_001", func() error {
			_, err := ob.EnqueueBatch(ctx, []Message{{ID: "ok-1"}, {ID: "bad", Payload: make([]byte, 2048)}})
			return err
		}},
		{"a batch with one id twice", "INPUT_001", func() error {
			_, err := ob.EnqueueBatch(ctx, []Message{{ID: "twice"}, {ID: "twice"}})
			return err
		}},
		{"a batch with a conflicting retry", "STATE_002", func() error {
			_, err := ob.EnqueueBatch(ctx, []Message{{ID: "ok-2"}, {ID: "pending-1", Payload: []byte("other")}})
			return err
		}},
		{"claim of no entries", "INPUT_001", func() error { _, err := ob.Claim(ctx, "w", 0, time.Minute); return err }},
		{"claim over the bound", "INPUT_001", func() error { _, err := ob.Claim(ctx, "w", MaxClaim+1, time.Minute); return err }},
		{"claim with a bad lease time", "INPUT_001", func() error { _, err := ob.Claim(ctx, "w", 1, 0); return err }},
		{"requeue of a done entry", "STATE_002", func() error { _, err := ob.Requeue(ctx, "done-1", AutoID); return err }},
		{"requeue of an unknown id", "STATE_003", func() error { _, err := ob.Requeue(ctx, "nobody", AutoID); return err }},
		{"requeue without a new id", "INPUT_001", func() error { _, err := ob.Requeue(ctx, "pending-1"); return err }},
		{"requeue with both new ids", "INPUT_001", func() error {
			_, err := ob.Requeue(ctx, "pending-1", AutoID, NewID("x"))
			return err
		}},
		{"requeue to an id in use", "STATE_002", func() error { _, err := ob.Requeue(ctx, "pending-1", NewID("done-1")); return err }},
		{"requeue with an oversize patch", "INPUT_001", func() error {
			_, err := ob.Requeue(ctx, "pending-1", AutoID, PatchPayload(make([]byte, 1025)))
			return err
		}},
		{"complete without a lease", "STATE_002", func() error {
			_, err := ob.Complete(ctx, Lease{ID: "pending-1", Token: 1}, nil)
			return err
		}},
		{"complete of a done entry", "STATE_002", func() error { _, err := ob.Complete(ctx, doneLease, nil); return err }},
		{"fail of a done entry", "STATE_002", func() error { _, err := ob.Fail(ctx, doneLease, errors.New("x")); return err }},
		{"extend of a done entry", "STATE_002", func() error { _, err := ob.Extend(ctx, doneLease, time.Minute); return err }},
		{"complete of an unknown id", "STATE_003", func() error { _, err := ob.Complete(ctx, Lease{ID: "nobody", Token: 1}, nil); return err }},
		{"an oversize result", "INPUT_001", func() error {
			_, err := ob.Complete(ctx, doneLease, make([]byte, 1025))
			return err
		}},
		{"enqueue of a done id with another payload", "STATE_002", func() error {
			_, err := ob.Enqueue(ctx, Message{ID: "done-1", Payload: []byte("y")})
			return err
		}},
		{"list of no state", "INPUT_001", func() error { _, err := ob.List(ctx, ListOptions{State: 9}); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if engine.CodeOf(err) != c.code {
				t.Fatalf("%v, want %s", err, c.code)
			}
			if h := head(t, db); h != before {
				t.Fatalf("the anchor grew from %d to %d records: something was written", before, h)
			}
		})
	}
	var se *StateError
	_, err = ob.Complete(ctx, Lease{ID: "pending-1", Token: 1}, nil)
	if !errors.As(err, &se) || se.State() != StatePending || se.Entry.ID != "pending-1" {
		t.Fatalf("a refusal carries the entry as it is: %v", err)
	}
	if _, err := ParseState("waiting"); engine.CodeOf(err) != "INPUT_001" {
		t.Fatalf("unknown state: %v", err)
	}
	mustVerify(t, ob)
}

// TestPolicyParsing: the retry policy is strict about its shape and
// content-addressed.
func TestPolicyParsing(t *testing.T) {
	def := DefaultPolicy()
	p, err := ParsePolicy([]byte(`{}`))
	if err != nil || p != def {
		t.Fatalf("empty policy: %+v %v", p, err)
	}
	if got := string(def.Canonical()); got != `{"version":"v1","max_attempts":8,"backoff":{"base_ms":1000,"multiplier":2,"cap_ms":3600000},"jitter":0.2}` {
		t.Fatalf("canonical form: %s", got)
	}
	p, err = ParsePolicy([]byte(` {"jitter": 0.20, "backoff": {"multiplier": 2.0}, "version":"v1"} `))
	if err != nil || p.PolicyRef() != def.PolicyRef() {
		t.Fatalf("the same policy spelled otherwise has another ref: %+v %v", p, err)
	}
	q, err := ParsePolicy(p.Canonical())
	if err != nil || q != p {
		t.Fatalf("canonical form does not parse back: %v", err)
	}
	for _, bad := range []string{
		``, `[]`, `{`, `{"version":"v2"}`, `{"max_attempt":3}`, `{"backoff":{"base":1}}`, `{"max_attempts":0}`,
		`{"max_attempts":1.5}`, `{"max_attempts":null}`, `{"jitter":1.5}`, `{"jitter":-0.1}`, `{"backoff":{"multiplier":0.5}}`,
		`{"backoff":{"base_ms":10,"cap_ms":5}}`, `{"backoff":{"cap_ms":-1}}`, `{"jitter":0.1,"jitter":0.2}`, `{} {}`,
		`{"backoff":[]}`, `{"version":1}`, `{"jitter":1e400}`,
	} {
		if _, err := ParsePolicy([]byte(bad)); engine.CodeOf(err) != "INPUT_001" {
			t.Errorf("policy %q: %v, want INPUT_001", bad, err)
		}
	}
	// The jitter is the same for the same (id, attempt), and within bounds.
	pol := Policy{Version: "v1", MaxAttempts: 5, Backoff: Backoff{BaseMS: 1000, Multiplier: 2, CapMS: 5000}, Jitter: 0.5}
	for a := 1; a <= 6; a++ {
		d := pol.Delay("x", a)
		if d != pol.Delay("x", a) {
			t.Fatal("the delay is not deterministic")
		}
		full := min(time.Duration(1000<<(a-1))*time.Millisecond, 5*time.Second)
		if d > full || d < full/2 {
			t.Errorf("attempt %d: delay %v out of [%v, %v]", a, d, full/2, full)
		}
	}
	db := openMemDB(t, newMem())
	defer db.Close()
	if _, err := Open(context.Background(), db, "x", Options{Policy: Policy{Version: "v1"}}); engine.CodeOf(err) != "INPUT_001" {
		t.Fatalf("Open with an invalid policy: %v", err)
	}
}
