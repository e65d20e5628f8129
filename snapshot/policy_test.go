package snapshot

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
)

// specPolicy is the shape of CONTRACT §6, verbatim.
const specPolicy = `{"version":"v1","snapshot":{"every_records":1000,"every_seconds":86400,"every_bytes":104857600},"keep_snapshots":3,"raw_log":"forever","verify_before_delete":true}`

// specPolicyRef is BLAKE3-256 of specPolicy, computed outside this package.
const specPolicyRef = "blake3:b12dc4ef2ae1c425a7210a761df87512207f1fbf935b25c2622cdc8edf130e0e"

func TestPolicyDefaultsAndCanonicalForm(t *testing.T) {
	if got := string(DefaultPolicy().Canonical()); got != specPolicy {
		t.Fatalf("canonical default\n got %s\nwant %s", got, specPolicy)
	}
	if got := DefaultPolicy().PolicyRef(); got != specPolicyRef {
		t.Fatalf("default policy_ref %s, want %s", got, specPolicyRef)
	}
	// Every way of writing the default policy has the default's ref.
	for _, doc := range []string{
		`{}`,
		specPolicy,
		`{"version":"v1"}`,
		"  {\n \"raw_log\" : \"forever\",\n \"version\":\"v1\", \"snapshot\": {} }\n",
		`{"verify_before_delete":true,"keep_snapshots":3,"snapshot":{"every_bytes":104857600,"every_seconds":86400,"every_records":1000},"raw_log":"forever","version":"v1"}`,
	} {
		p, err := ParsePolicy([]byte(doc))
		if err != nil {
			t.Fatalf("ParsePolicy(%s): %v", doc, err)
		}
		if p != DefaultPolicy() || p.PolicyRef() != specPolicyRef {
			t.Fatalf("ParsePolicy(%s) = %+v (%s)", doc, p, p.PolicyRef())
		}
	}
}

func TestPolicyPartialAndRoundTrip(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"snapshot":{"every_records":5},"keep_snapshots":1,"raw_log":"truncate","verify_before_delete":false}`))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPolicy()
	want.Snapshot.EveryRecords, want.KeepSnapshots, want.RawLog, want.VerifyBeforeDelete = 5, 1, RawLogTruncate, false
	if p != want {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	const canon = `{"version":"v1","snapshot":{"every_records":5,"every_seconds":86400,"every_bytes":104857600},"keep_snapshots":1,"raw_log":"truncate","verify_before_delete":false}`
	if string(p.Canonical()) != canon {
		t.Fatalf("canonical %s", p.Canonical())
	}
	q, err := ParsePolicy(p.Canonical())
	if err != nil || q != p || q.PolicyRef() != p.PolicyRef() || p.PolicyRef() == specPolicyRef {
		t.Fatalf("round trip: %+v %v", q, err)
	}
	var r struct{ P Policy }
	if err := json.Unmarshal([]byte(`{"P":`+canon+`}`), &r); err != nil || r.P != p {
		t.Fatalf("UnmarshalJSON: %+v %v", r.P, err)
	}
	b, _ := json.Marshal(r)
	if string(b) != `{"P":`+canon+`}` {
		t.Fatalf("MarshalJSON: %s", b)
	}
	zero, _ := ParsePolicy([]byte(`{"snapshot":{"every_records":0,"every_seconds":0,"every_bytes":0}}`))
	if zero.Snapshot != (Triggers{}) {
		t.Fatalf("zero triggers: %+v", zero.Snapshot)
	}
}

func TestPolicyRejects(t *testing.T) {
	cases := []struct{ doc, mention string }{
		{`{"keep_snapshot":1}`, `"keep_snapshot"`},
		{`{"version":"v1","keep_snapshot":1}`, `"keep_snapshot"`},
		{`{"snapshot":{"every_record":1}}`, `"snapshot.every_record"`},
		{`{"snapshot":{"every_records":1,"extra":{"deep":true}}}`, `"snapshot.extra"`},
		{`{"Version":"v1"}`, `"Version"`},
		{`{"keep_snapshots":1,"keep_snapshots":2}`, "twice"},
		{`{"snapshot":{"every_bytes":1,"every_bytes":1}}`, "twice"},
		{`{"keep_snapshots":null}`, "null"},
		{`{"snapshot":null}`, "null"},
		{`{"snapshot":[]}`, "array"},
		{`{"keep_snapshots":"3"}`, "integer"},
		{`{"keep_snapshots":3.0}`, "integer"},
		{`{"keep_snapshots":1e3}`, "integer"},
		{`{"keep_snapshots":99999999999999999999}`, "integer"},
		{`{"verify_before_delete":"yes"}`, "true or false"},
		{`{"version":1}`, "string"},
		{`{"keep_snapshots":0}`, "keep_snapshots"},
		{`{"keep_snapshots":-1}`, "keep_snapshots"},
		{`{"snapshot":{"every_records":-1}}`, "every_records"},
		{`{"snapshot":{"every_bytes":-5}}`, "every_bytes"},
		{`{"snapshot":{"every_seconds":-1}}`, "every_seconds"},
		{`{"snapshot":{"every_seconds":9223372036854775807}}`, "every_seconds"},
		{`{"raw_log":"sometimes"}`, "raw_log"},
		{`{"raw_log":"Forever"}`, "raw_log"},
		{`{"version":"v2"}`, "version"},
		{`{"version":""}`, "version"},
		{`{} {}`, "after"},
		{`{}x`, ""},
		{`[]`, "object"},
		{`"v1"`, "object"},
		{``, ""},
		{`{"keep_snapshots":3`, ""},
		{`{"keep_snapshots"}`, ""},
	}
	for _, c := range cases {
		_, err := ParsePolicy([]byte(c.doc))
		if errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("ParsePolicy(%s) = %v, want INPUT_001", c.doc, err)
			continue
		}
		if !strings.Contains(err.Error(), c.mention) {
			t.Errorf("ParsePolicy(%s) = %v; want it to mention %s", c.doc, err, c.mention)
		}
	}
}
