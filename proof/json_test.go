package proof

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	merkleproof "github.com/transparency-dev/merkle/proof"
)

// keys returns the top-level keys of a JSON object in order.
func keys(t *testing.T, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", data)
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func sampleProofs(t *testing.T) (*InclusionProof, *ConsistencyProof, *FrontierProof) {
	t.Helper()
	st, _ := small(t)
	inc, err := ProveInclusion(ctx, st, `dev "1" <a&b> Ünï`, 7, 100, recordHash(6))
	if err != nil {
		t.Fatal(err)
	}
	con, err := ProveConsistency(ctx, st, "dev-1", 50, 100)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := ProveFrontier(testEntries(t, 5), "anchor 2")
	if err != nil {
		t.Fatal(err)
	}
	return inc, con, fr
}

func TestProofJSONShapesAndRoundTrips(t *testing.T) {
	inc, con, fr := sampleProofs(t)
	fr.Origin = "anchordb/x/blake3"
	for _, c := range []struct {
		proof any
		into  any
		keys  string
		kind  Kind
	}{
		{inc, new(InclusionProof), "anchor,seq,size,leaf,root,proof,kind", KindInclusion},
		{con, new(ConsistencyProof), "anchor,old_size,new_size,old_root,new_root,proof,kind", KindConsistency},
		{fr, new(FrontierProof), "anchor,size,anchor_root,index,anchors,root,proof,origin,kind", KindFrontier},
	} {
		data, err := json.Marshal(c.proof)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(keys(t, data), ","); got != c.keys {
			t.Fatalf("%s keys %s, want %s", c.kind, got, c.keys)
		}
		if err := json.Unmarshal(data, c.into); err != nil {
			t.Fatalf("%s: %v", c.kind, err)
		}
		if !reflect.DeepEqual(c.into, c.proof) {
			t.Fatalf("%s round trip: got %+v, want %+v", c.kind, c.into, c.proof)
		}
		v, err := VerifyJSON(data)
		if err != nil {
			t.Fatalf("%s: VerifyJSON: %v", c.kind, err)
		}
		if v.Kind != c.kind || v.String() == "no proof" {
			t.Fatalf("VerifyJSON kind %q (%s), want %q", v.Kind, v, c.kind)
		}
		// Hashes print as blake3:<64 lowercase hex>.
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		for k, val := range m {
			if s, ok := val.(string); ok && strings.HasPrefix(s, "blake3:") {
				if _, err := segment.ParseHash(s); err != nil {
					t.Fatalf("%s field %s: %v", c.kind, k, err)
				}
			}
		}
	}
	// No HTML escaping of its own: through an encoder that does not escape,
	// the anchor id prints as it is.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(inc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"anchor":"dev \"1\" <a&b> Ünï"`)) {
		t.Fatalf("anchor printed as %s", buf.Bytes())
	}
}

func TestProofJSONEmptyPathIsArray(t *testing.T) {
	st, _ := small(t)
	p, err := ProveInclusion(ctx, st, "a", 1, 1, recordHash(0))
	if err != nil {
		t.Fatal(err)
	}
	p.Proof = nil
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"proof":[]`)) {
		t.Fatalf("empty proof printed as %s", data)
	}
	if _, err := VerifyJSON(data); err != nil {
		t.Fatalf("size-1 proof: %v", err)
	}
}

// withoutKind drops the "kind" field: the bare CONTRACT §10 shape.
func withoutKind(t *testing.T, data []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "kind")
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// edit decodes data, applies f to the field map and re-encodes it.
func edit(t *testing.T, data []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerifyJSON(t *testing.T) {
	inc, con, fr := sampleProofs(t)
	incJSON, _ := json.Marshal(inc)
	conJSON, _ := json.Marshal(con)
	frJSON, _ := json.Marshal(fr)
	zero := "blake3:" + strings.Repeat("0", 64)

	ok := []struct {
		name string
		data []byte
		kind Kind
	}{
		{"inclusion", incJSON, KindInclusion},
		{"inclusion without kind", withoutKind(t, incJSON), KindInclusion},
		{"consistency", conJSON, KindConsistency},
		{"consistency without kind", withoutKind(t, conJSON), KindConsistency},
		{"frontier", frJSON, KindFrontier},
		{"frontier without kind", withoutKind(t, frJSON), KindFrontier},
		{"trailing white space", append(append([]byte(nil), incJSON...), " \n"...), KindInclusion},
	}
	for _, c := range ok {
		v, err := VerifyJSON(c.data)
		if err != nil || v.Kind != c.kind {
			t.Fatalf("%s: %v (kind %q)", c.name, err, v.Kind)
		}
	}

	bad := []struct {
		name string
		data []byte
		code errs.Code
	}{
		{"changed leaf", edit(t, incJSON, func(m map[string]any) { m["leaf"] = zero }), errs.CodeHashMismatch},
		{"changed root", edit(t, incJSON, func(m map[string]any) { m["root"] = zero }), errs.CodeHashMismatch},
		{"changed seq", edit(t, incJSON, func(m map[string]any) { m["seq"] = 8 }), errs.CodeHashMismatch},
		{"changed size", edit(t, incJSON, func(m map[string]any) { m["size"] = 50 }), errs.CodeHashMismatch},
		{"dropped proof hash", edit(t, incJSON, func(m map[string]any) { p := m["proof"].([]any); m["proof"] = p[1:] }), errs.CodeHashMismatch},
		{"changed proof hash", edit(t, incJSON, func(m map[string]any) { m["proof"].([]any)[0] = zero }), errs.CodeHashMismatch},
		{"changed old root", edit(t, conJSON, func(m map[string]any) { m["old_root"] = zero }), errs.CodeHashMismatch},
		{"changed new root", edit(t, conJSON, func(m map[string]any) { m["new_root"] = zero }), errs.CodeHashMismatch},
		{"changed old size", edit(t, conJSON, func(m map[string]any) { m["old_size"] = 49 }), errs.CodeHashMismatch},
		{"frontier changed anchor", edit(t, frJSON, func(m map[string]any) { m["anchor"] = "anchor 3" }), errs.CodeHashMismatch},
		{"frontier changed size", edit(t, frJSON, func(m map[string]any) { m["size"] = 1 }), errs.CodeHashMismatch},
		{"frontier changed anchor root", edit(t, frJSON, func(m map[string]any) { m["anchor_root"] = zero }), errs.CodeHashMismatch},
		{"frontier changed index", edit(t, frJSON, func(m map[string]any) { m["index"] = 1 }), errs.CodeHashMismatch},
		{"not JSON", []byte("{"), errs.CodeInvalidInput},
		{"empty", nil, errs.CodeInvalidInput},
		{"array", []byte("[]"), errs.CodeInvalidInput},
		{"null", []byte("null"), errs.CodeInvalidInput},
		{"not a proof", []byte(`{"anchor":"a"}`), errs.CodeInvalidInput},
		{"unknown kind", edit(t, incJSON, func(m map[string]any) { m["kind"] = "other" }), errs.CodeInvalidInput},
		{"kind not a string", edit(t, incJSON, func(m map[string]any) { m["kind"] = 3 }), errs.CodeInvalidInput},
		{"kind mismatch", edit(t, incJSON, func(m map[string]any) { m["kind"] = "consistency" }), errs.CodeInvalidInput},
		{"unknown field", edit(t, incJSON, func(m map[string]any) { m["extra"] = 1 }), errs.CodeInvalidInput},
		{"missing leaf", edit(t, incJSON, func(m map[string]any) { delete(m, "leaf") }), errs.CodeInvalidInput},
		{"null proof", edit(t, incJSON, func(m map[string]any) { m["proof"] = nil }), errs.CodeInvalidInput},
		{"missing new_root", edit(t, conJSON, func(m map[string]any) { delete(m, "new_root") }), errs.CodeInvalidInput},
		{"missing anchors", edit(t, frJSON, func(m map[string]any) { delete(m, "anchors") }), errs.CodeInvalidInput},
		{"upper-case hex", edit(t, incJSON, func(m map[string]any) { m["leaf"] = strings.ToUpper(m["leaf"].(string)) }), errs.CodeInvalidInput},
		{"sha256 prefix", edit(t, incJSON, func(m map[string]any) { m["root"] = "sha256:" + strings.Repeat("0", 64) }), errs.CodeInvalidInput},
		{"short hash", edit(t, incJSON, func(m map[string]any) { m["root"] = "blake3:00" }), errs.CodeInvalidInput},
		{"seq 0", edit(t, incJSON, func(m map[string]any) { m["seq"] = 0 }), errs.CodeInvalidInput},
		{"seq > size", edit(t, incJSON, func(m map[string]any) { m["seq"] = 101 }), errs.CodeInvalidInput},
		{"negative seq", edit(t, incJSON, func(m map[string]any) { m["seq"] = -1 }), errs.CodeInvalidInput},
		{"seq as string", edit(t, incJSON, func(m map[string]any) { m["seq"] = "7" }), errs.CodeInvalidInput},
		{"empty anchor", edit(t, incJSON, func(m map[string]any) { m["anchor"] = "" }), errs.CodeInvalidInput},
		{"control in anchor", edit(t, incJSON, func(m map[string]any) { m["anchor"] = "a\nb" }), errs.CodeInvalidInput},
		{"old > new", edit(t, conJSON, func(m map[string]any) { m["old_size"] = 101 }), errs.CodeInvalidInput},
		{"index >= anchors", edit(t, frJSON, func(m map[string]any) { m["index"] = 5 }), errs.CodeInvalidInput},
		{"trailing data", append(append([]byte(nil), incJSON...), "{}"...), errs.CodeInvalidInput},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyJSON(c.data)
			testutil.WantCode(t, err, c.code)
		})
	}

	// A hash mismatch wraps merkle's RootMismatchError and is located.
	_, err := VerifyJSON(bad[0].data)
	var rm merkleproof.RootMismatchError
	if !errors.As(err, &rm) {
		t.Fatalf("changed leaf: %v does not wrap RootMismatchError", err)
	}
	var e *errs.Error
	if errors.As(err, &e); e.Anchor != inc.Anchor || e.Seq != 7 || !errors.Is(err, errs.ErrHashMismatch) {
		t.Fatalf("changed leaf: error located at %q seq %d", e.Anchor, e.Seq)
	}
}

func TestVerifyProofFunctionsRejectEveryChangedByte(t *testing.T) {
	inc, con, fr := sampleProofs(t)
	check := func(what string, verify func() error, b []byte) {
		t.Helper()
		for i := range b {
			b[i] ^= 1
			err := verify()
			b[i] ^= 1
			testutil.WantCode(t, err, errs.CodeHashMismatch)
			_ = what
		}
		if err := verify(); err != nil {
			t.Fatalf("%s: restored proof fails: %v", what, err)
		}
	}
	vi := func() error { return VerifyInclusionProof(inc) }
	check("leaf", vi, inc.Leaf[:])
	check("root", vi, inc.Root[:])
	for j := range inc.Proof {
		check("inclusion path", vi, inc.Proof[j][:])
	}
	vc := func() error { return VerifyConsistencyProof(con) }
	check("old root", vc, con.OldRoot[:])
	check("new root", vc, con.NewRoot[:])
	for j := range con.Proof {
		check("consistency path", vc, con.Proof[j][:])
	}
	vf := func() error { return VerifyFrontierProof(fr) }
	check("anchor root", vf, fr.AnchorRoot[:])
	check("frontier root", vf, fr.Root[:])
	for j := range fr.Proof {
		check("frontier path", vf, fr.Proof[j][:])
	}
}

func TestVerifyConsistencyEdgeCases(t *testing.T) {
	empty := emptyRoot()
	var other segment.Hash
	other[0] = 1
	for _, c := range []struct {
		name string
		p    *ConsistencyProof
		code errs.Code // "" for success
	}{
		{"nil", nil, errs.CodeInvalidInput},
		{"empty to empty", &ConsistencyProof{Anchor: "a", OldRoot: empty, NewRoot: empty}, ""},
		{"empty to empty, wrong new root", &ConsistencyProof{Anchor: "a", OldRoot: empty, NewRoot: other}, errs.CodeHashMismatch},
		{"empty to 5", &ConsistencyProof{Anchor: "a", NewSize: 5, OldRoot: empty, NewRoot: other}, ""},
		{"empty with a wrong old root", &ConsistencyProof{Anchor: "a", NewSize: 5, OldRoot: other, NewRoot: other}, errs.CodeHashMismatch},
		{"empty with a path", &ConsistencyProof{Anchor: "a", NewSize: 5, OldRoot: empty, NewRoot: other, Proof: []segment.Hash{other}}, errs.CodeHashMismatch},
		{"equal sizes, equal roots", &ConsistencyProof{Anchor: "a", OldSize: 5, NewSize: 5, OldRoot: other, NewRoot: other}, ""},
		{"equal sizes, other roots", &ConsistencyProof{Anchor: "a", OldSize: 5, NewSize: 5, OldRoot: other, NewRoot: empty}, errs.CodeHashMismatch},
		{"grown with no path", &ConsistencyProof{Anchor: "a", OldSize: 3, NewSize: 5, OldRoot: other, NewRoot: empty}, errs.CodeHashMismatch},
	} {
		err := VerifyConsistencyProof(c.p)
		if c.code == "" {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			continue
		}
		testutil.WantCode(t, err, c.code)
	}
}

// TestProofJSONKeysAreExact: VerifyJSON verifies the proof a plain reader
// of the file sees. Users compare a proof's "anchor", "size" and "root" with
// a signed checkpoint using any JSON tool; encoding/json alone matches keys
// without regard to case, so a file carrying the trusted root as "root" and
// the forger's as "Root" would verify a forged leaf.
// A key that is not exactly a documented name, or appears twice, is
// INPUT_001.
func TestProofJSONKeysAreExact(t *testing.T) {
	ctx := context.Background()
	// The honest tree, whose root a signed checkpoint holds.
	honest := NewMemStore()
	for i := 0; i < 4; i++ {
		_ = honest.Append(segment.Hash{byte(i + 1)})
	}
	trusted := honest.Root()
	// The forger's tree with a record that never existed at seq 2.
	forged := NewMemStore()
	fake := segment.Hash{0xEE}
	for i := 0; i < 4; i++ {
		h := segment.Hash{byte(i + 1)}
		if i == 1 {
			h = fake
		}
		_ = forged.Append(h)
	}
	p, err := ProveInclusion(ctx, forged, "a", 2, 4, fake)
	if err != nil {
		t.Fatal(err)
	}
	proofJSON, _ := json.Marshal(p.Proof)
	doc := `{"anchor":"a","seq":2,"size":4,"leaf":"` + fake.String() + `","root":"` + trusted.String() +
		`","Root":"` + p.Root.String() + `","proof":` + string(proofJSON) + `,"kind":"inclusion"}`

	// What a case-sensitive reader (jq, python, Go map) sees as the root:
	var plain map[string]any
	if err := json.Unmarshal([]byte(doc), &plain); err != nil {
		t.Fatal(err)
	}
	if plain["root"] != trusted.String() {
		t.Fatalf("setup: plain root %v", plain["root"])
	}
	v, err := VerifyJSON([]byte(doc))
	if err == nil {
		t.Fatalf("VerifyJSON accepted a proof whose \"root\" is the trusted root %s but which verified against a second key \"Root\" %s: %s",
			trusted, v.Inclusion.Root, v)
	}
	if errs.CodeOf(err) != errs.CodeInvalidInput {
		t.Fatalf("refused with %v, want INPUT_001", err)
	}
	// The honest proof verifies; with any key in another case, or twice,
	// it is INPUT_001.
	good, err := ProveInclusion(ctx, honest, "a", 2, 4, segment.Hash{2})
	if err != nil {
		t.Fatal(err)
	}
	goodJSON, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyJSON(goodJSON); err != nil {
		t.Fatalf("the honest proof: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(string(goodJSON), `"seq"`, `"SEQ"`, 1),
		strings.Replace(string(goodJSON), `"anchor"`, `"Anchor"`, 1),
		strings.Replace(string(goodJSON), `{`, `{"size":4,`, 1),
	} {
		if _, err := VerifyJSON([]byte(bad)); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%s: err %v, want INPUT_001", bad, err)
		}
	}
	// An escape spells the same key: "r\u006fot" is "root".
	escaped := strings.Replace(string(goodJSON), `"root"`, `"r\u006fot"`, 1)
	if _, err := VerifyJSON([]byte(escaped)); err != nil {
		t.Errorf("%s: %v", escaped, err)
	}
}

// A proof file with a null among its path hashes is not a proof (FORMAT
// §10.4: decoders refuse nulls), so verify-proof must say INPUT_001 (exit
// 2). encoding/json leaves a null element of a []segment.Hash as the zero
// hash: without the refusal the file decodes and fails as a proof that does
// not verify (INT_001, exit 1).
func TestProofPathNullIsRefused(t *testing.T) {
	ctx := context.Background()
	st := NewMemStore()
	for i := 0; i < 5; i++ {
		var h segment.Hash
		h[0] = byte(i + 1)
		if err := st.Append(h); err != nil {
			t.Fatal(err)
		}
	}
	var leaf segment.Hash
	leaf[0] = 3
	inc, err := ProveInclusion(ctx, st, "a", 3, 5, leaf)
	if err != nil {
		t.Fatal(err)
	}
	con, err := ProveConsistency(ctx, st, "a", 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]any{"inclusion": inc, "consistency": con} {
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		m["proof"] = append(m["proof"].([]any), nil)
		data, _ = json.Marshal(m)
		if _, err := VerifyJSON(data); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%s proof with a null path hash: %v, want INPUT_001", name, err)
		}
		m["proof"] = []any{nil}
		data, _ = json.Marshal(m)
		if _, err := VerifyJSON(data); errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%s proof whose path is [null]: %v, want INPUT_001", name, err)
		}
	}
}

// A proof that does not verify says so on one line, with both roots as
// anchordb prints hashes. merkle/proof's RootMismatchError prints them as
// decimal byte lists on four lines, which would break verify's
// one-line-per-finding output and put newlines in the JSON message; the
// error still wraps it for errors.As.
func TestProofErrorsAreOneLine(t *testing.T) {
	ctx := context.Background()
	st := NewMemStore()
	for i := 0; i < 9; i++ {
		if err := st.Append(recordHash(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	inc, err := ProveInclusion(ctx, st, "a", 3, 9, recordHash(2))
	if err != nil {
		t.Fatal(err)
	}
	inc.Leaf[0] ^= 1
	con, err := ProveConsistency(ctx, st, "a", 4, 9)
	if err != nil {
		t.Fatal(err)
	}
	con.OldRoot[0] ^= 1
	empty := &ConsistencyProof{Anchor: "a", OldSize: 0, NewSize: 9, OldRoot: con.NewRoot, NewRoot: con.NewRoot, Proof: []segment.Hash{}}
	hashRE := regexp.MustCompile(`calculated root blake3:[0-9a-f]{64} does not match expected root blake3:[0-9a-f]{64}`)
	for name, err := range map[string]error{
		"inclusion":             VerifyInclusionProof(inc),
		"consistency":           VerifyConsistencyProof(con),
		"consistency from zero": VerifyConsistencyProof(empty),
	} {
		testutil.WantCode(t, err, errs.CodeHashMismatch)
		var rm merkleproof.RootMismatchError
		if !errors.As(err, &rm) {
			t.Errorf("%s: %v does not wrap RootMismatchError", name, err)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !hashRE.MatchString(msg) {
			t.Errorf("%s: %q; want one line naming both roots as blake3:<hex>", name, msg)
		}
	}
}
