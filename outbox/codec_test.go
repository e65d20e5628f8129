package outbox

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"pgregory.net/rapid"
)

func genTime(t *rapid.T, label string) time.Time {
	return time.Unix(0, rapid.Int64Range(-1<<60, 1<<60).Draw(t, label)).UTC()
}

// genEntry draws an entry in a random state with random contents: control
// characters, quotes and backslashes in its strings, payloads that are not
// UTF-8.
func genEntry(t *rapid.T) (*Entry, transition) {
	s := State(rapid.IntRange(1, 5).Draw(t, "state"))
	e := &Entry{Outbox: "ob", ID: "id", State: s, EnqueueSeq: rapid.Uint64().Draw(t, "enq"),
		EnqueuedAt: genTime(t, "enqueued"), NextAttemptAt: genTime(t, "next"), Attempts: rapid.IntRange(0, 1e6).Draw(t, "attempts"),
		Destination: rapid.String().Draw(t, "dest")}
	if rapid.Bool().Draw(t, "payload") {
		e.Payload = rapid.SliceOf(rapid.Byte()).Draw(t, "payload bytes")
		e.PayloadSize = len(e.Payload)
	} else {
		e.PayloadSize = rapid.IntRange(0, 1<<20).Draw(t, "size")
	}
	e.Fingerprint = Fingerprint(e.Payload, e.Destination, nil)
	if n := rapid.IntRange(0, 3).Draw(t, "headers"); n > 0 {
		e.Headers = map[string]string{}
		for i := 0; i < n; i++ {
			e.Headers[rapid.String().Draw(t, "hk")] = rapid.String().Draw(t, "hv")
		}
	}
	if s == StateInflight {
		e.Lease = &Lease{ID: "id", Worker: rapid.String().Draw(t, "worker"), Token: rapid.Uint64().Draw(t, "token"),
			ClaimedAt: genTime(t, "claimed"), ExpiresAt: genTime(t, "expires")}
	}
	if rapid.Bool().Draw(t, "failed") {
		e.LastError = &Failure{Message: rapid.String().Draw(t, "msg"), Permanent: rapid.Bool().Draw(t, "perm"),
			At: genTime(t, "fat"), Attempt: rapid.IntRange(0, 100).Draw(t, "fattempt"), PolicyRef: DefaultPolicy().PolicyRef()}
	}
	if rapid.Bool().Draw(t, "result") {
		e.Result = rapid.SliceOf(rapid.Byte()).Draw(t, "result bytes")
	}
	for _, f := range []*time.Time{&e.DoneAt, &e.DeadAt, &e.AbortedAt} {
		if rapid.Bool().Draw(t, "terminal time") {
			*f = genTime(t, "t")
		}
	}
	e.AbortedBy = rapid.String().Draw(t, "by")
	e.SupersededBy = rapid.String().Draw(t, "superseded by")
	e.Supersedes = rapid.String().Draw(t, "supersedes")
	tr := transition{op: rapid.SampledFrom([]string{opEnqueue, opClaim, opFail}).Draw(t, "op"), at: genTime(t, "at"),
		by: rapid.String().Draw(t, "tby"), token: rapid.Uint64().Draw(t, "ttoken")}
	if rapid.Bool().Draw(t, "has prev") {
		tr.prev = prevEntry(rowRef{state: State(rapid.IntRange(1, 5).Draw(t, "prev state")), at: rapid.Int64Range(-1<<60, 1<<60).Draw(t, "prev at")})
		if rowKind(tr.prev.State) == 0 {
			tr.prev = prevEntry(rowRef{state: tr.prev.State})
		}
	}
	return e, tr
}

// TestRecordRoundTrip: an entry record is valid JSON in the recordJSON
// shape, decodes to the entry it encodes, and has one spelling.
func TestRecordRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e, tr := genEntry(t)
		b := encodeRecord(e, tr)
		if !json.Valid(b) {
			t.Fatalf("not JSON: %s", b)
		}
		rc := engine.Receipt{Anchor: "outbox/ob", Seq: 1 + rapid.Uint64Range(0, 1<<40).Draw(t, "seq")}
		d, err := decodeRecord("ob", "id", b, rc)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		want := *e
		want.Receipt = rc
		if want.EnqueueSeq == 0 {
			want.EnqueueSeq = rc.Seq
		}
		if want.Lease != nil && want.Lease.Token == 0 {
			l := *want.Lease
			l.Token = rc.Seq
			want.Lease = &l
		}
		if !reflect.DeepEqual(d.entry, want) {
			t.Fatalf("decoded %+v\nwant    %+v\nfrom %s", d.entry, want, b)
		}
		if d.op != tr.op || !d.at.Equal(tr.at) || d.by != tr.by || d.token != tr.token {
			t.Fatalf("transition %+v, want %+v", d, tr)
		}
		// Any other spelling of the same JSON is refused.
		var anyJSON map[string]any
		if err := json.Unmarshal(b, &anyJSON); err != nil {
			t.Fatal(err)
		}
		other, _ := json.MarshalIndent(anyJSON, "", " ")
		if _, err := decodeRecord("ob", "id", other, rc); err == nil {
			t.Fatalf("a record spelled another way was accepted:\n%s", other)
		}
	})
}
