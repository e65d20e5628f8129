package proof

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"golang.org/x/mod/sumdb/note"
)

var testTime = time.Date(2026, 1, 31, 12, 0, 0, 1, time.UTC)

// trickyIDs are legal anchor ids that a line format could get wrong.
var trickyIDs = []string{
	"a", "user@host", "a/b", "../x", "Ünïcode", "with space", `quote"d`, `back\slash`, `"`, "\u2028 and \u2029",
	"— dash", "anchor \"x\" 1 blake3:00", "emoji 🙂", "<tag>&amp;", " leading", "trailing ", "\u00a0nbsp",
	strings.Repeat("z", 255),
}

// sampleCheckpoint returns a checkpoint over trickyIDs with MemStore roots.
func sampleCheckpoint(t testing.TB) (*Checkpoint, map[string]*MemStore) {
	t.Helper()
	stores := map[string]*MemStore{}
	var entries []Entry
	for i, id := range trickyIDs {
		st := NewMemStore()
		for j := 0; j < i*7; j++ {
			if err := st.Append(recordHash(uint64(i*1000 + j))); err != nil {
				t.Fatal(err)
			}
		}
		stores[id] = st
		entries = append(entries, Entry{Anchor: id, Size: st.Size(), Root: st.Root()})
	}
	c, err := NewCheckpoint("db-1", testTime, entries)
	if err != nil {
		t.Fatal(err)
	}
	return c, stores
}

func TestCheckpointGoldenBody(t *testing.T) {
	e0 := Entry{Anchor: "b c", Size: 2, Root: recordHash(1)}
	e1 := Entry{Anchor: `a"<`, Size: 1, Root: recordHash(2)}
	c, err := NewCheckpoint("0123abcd", testTime, []Entry{e0, e1})
	if err != nil {
		t.Fatal(err)
	}
	want := "anchordb/0123abcd/blake3\n" +
		"anchors 2\n" +
		"records 3\n" +
		"root " + c.Root.String() + "\n" +
		"time 2026-01-31T12:00:00.000000001Z\n" +
		`anchor "a\"<" 1 ` + e1.Root.String() + "\n" +
		`anchor "b c" 2 ` + e0.Root.String() + "\n"
	if got := string(c.Marshal()); got != want {
		t.Fatalf("body:\n%s\nwant:\n%s", got, want)
	}
	root, _ := FrontierRoot([]Entry{e1, e0})
	if c.Root != root || c.Anchors != 2 || c.Records != 3 {
		t.Fatalf("commitment %+v", c)
	}
	// Whole seconds print without a fraction.
	c.Time = time.Date(2026, 1, 31, 13, 0, 0, 0, time.FixedZone("CET", 3600))
	if !bytes.Contains(c.Marshal(), []byte("\ntime 2026-01-31T12:00:00Z\n")) {
		t.Fatalf("time line in %s", c.Marshal())
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	c, _ := sampleCheckpoint(t)
	body := c.Marshal()
	got, err := ParseCheckpointBody(body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if !got.Time.Equal(c.Time) {
		t.Fatalf("time %v, want %v", got.Time, c.Time)
	}
	got.Time = c.Time
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", got, c)
	}
	for _, id := range trickyIDs {
		if _, ok := got.Entry(id); !ok {
			t.Fatalf("anchor %q lost", id)
		}
	}
	// Every line is one line: no id broke out of its line.
	if n := bytes.Count(body, []byte("\n")); n != headerLines+len(trickyIDs) {
		t.Fatalf("%d lines for %d anchors", n, len(trickyIDs))
	}
	// Empty database.
	empty, err := NewCheckpoint("db-1", testTime, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err = ParseCheckpointBody(empty.Marshal())
	if err != nil || got.Anchors != 0 || got.Root != emptyRoot() || len(got.Entries) != 0 {
		t.Fatalf("empty checkpoint: %+v, %v", got, err)
	}
}

func TestParseCheckpointBodyRejects(t *testing.T) {
	c, err := NewCheckpoint("db", testTime, []Entry{{Anchor: "a", Size: 2, Root: recordHash(1)}, {Anchor: "b", Size: 3, Root: recordHash(2)}})
	if err != nil {
		t.Fatal(err)
	}
	body := string(c.Marshal())
	lines := strings.SplitAfter(body, "\n")
	replace := func(i int, s string) string {
		l := append([]string(nil), lines...)
		l[i] = s
		return strings.Join(l, "")
	}
	aLine, bLine := lines[5], lines[6]
	otherRoot := recordHash(99).String()
	cases := []struct {
		name string
		body string
		code errs.Code
	}{
		{"empty", "", errs.CodeInvalidInput},
		{"no final newline", strings.TrimSuffix(body, "\n"), errs.CodeInvalidInput},
		{"CRLF", strings.ReplaceAll(body, "\n", "\r\n"), errs.CodeInvalidInput},
		{"blank line", body + "\n", errs.CodeInvalidInput},
		{"extra line", body + "extension\n", errs.CodeInvalidInput},
		{"bad origin", replace(0, "sumdb/db/blake3\n"), errs.CodeInvalidInput},
		{"origin with space", replace(0, "anchordb/d b/blake3\n"), errs.CodeInvalidInput},
		{"empty db id", replace(0, "anchordb//blake3\n"), errs.CodeInvalidInput},
		{"anchors leading zero", replace(1, "anchors 02\n"), errs.CodeInvalidInput},
		{"anchors plus", replace(1, "anchors +2\n"), errs.CodeInvalidInput},
		{"anchors wrong", replace(1, "anchors 3\n"), errs.CodeInvalidInput},
		{"anchors huge", replace(1, "anchors 18446744073709551615\n"), errs.CodeInvalidInput},
		{"anchors overflow", replace(1, "anchors 18446744073709551616\n"), errs.CodeInvalidInput},
		{"records wrong", replace(2, "records 6\n"), errs.CodeInvalidInput},
		{"records label", replace(2, "Records 5\n"), errs.CodeInvalidInput},
		{"root wrong", replace(3, "root "+otherRoot+"\n"), errs.CodeHashMismatch},
		{"root upper hex", replace(3, strings.ToUpper(lines[3][:5])+lines[3][5:]), errs.CodeInvalidInput},
		{"time offset", replace(4, "time 2026-01-31T13:00:00.000000001+01:00\n"), errs.CodeInvalidInput},
		{"time not RFC 3339", replace(4, "time yesterday\n"), errs.CodeInvalidInput},
		{"time trailing zeros", replace(4, "time 2026-01-31T12:00:00.0000000010Z\n"), errs.CodeInvalidInput},
		{"entries unsorted", replace(6, aLine) + "", errs.CodeInvalidInput},
		{"entries swapped", strings.Join(append(append(append([]string(nil), lines[:5]...), bLine), aLine), ""), errs.CodeInvalidInput},
		{"entry escaped id", replace(5, strings.Replace(aLine, `"a"`, `"\u0061"`, 1)), errs.CodeInvalidInput},
		{"entry unquoted id", replace(5, strings.Replace(aLine, `"a"`, `a`, 1)), errs.CodeInvalidInput},
		{"entry unterminated id", replace(5, `anchor "a 2 `+recordHash(1).String()+"\n"), errs.CodeInvalidInput},
		{"entry bad escape", replace(5, strings.Replace(aLine, `"a"`, `"\q"`, 1)), errs.CodeInvalidInput},
		{"entry two spaces", replace(5, strings.Replace(aLine, `" 2`, `"  2`, 1)), errs.CodeInvalidInput},
		{"entry missing root", replace(5, `anchor "a" 2`+"\n"), errs.CodeInvalidInput},
		{"entry extra field", replace(5, strings.TrimSuffix(aLine, "\n")+" x\n"), errs.CodeInvalidInput},
		{"entry size leading zero", replace(5, strings.Replace(aLine, `" 2 `, `" 02 `, 1)), errs.CodeInvalidInput},
		{"entry changed root", replace(5, `anchor "a" 2 `+otherRoot+"\n"), errs.CodeHashMismatch},
		{"entry changed size", replace(5, strings.Replace(aLine, `" 2 `, `" 3 `, 1)), errs.CodeInvalidInput},
		{"entry control id", replace(5, strings.Replace(aLine, `"a"`, `"a\n"`, 1)), errs.CodeInvalidInput},
		{"entry empty id", replace(5, strings.Replace(aLine, `"a"`, `""`, 1)), errs.CodeInvalidInput},
		{"invalid UTF-8", replace(5, strings.Replace(aLine, `"a"`, "\"\xff\"", 1)), errs.CodeInvalidInput},
		{"truncated", body[:len(body)/2] + "\n", errs.CodeInvalidInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCheckpointBody([]byte(c.body))
			testutil.WantCode(t, err, c.code)
		})
	}
	if _, err := ParseCheckpointBody([]byte(body)); err != nil {
		t.Fatalf("the unchanged body: %v", err)
	}
}

func TestCheckpointValidate(t *testing.T) {
	c, _ := sampleCheckpoint(t)
	for _, bad := range []struct {
		name string
		f    func(c *Checkpoint)
		code errs.Code
	}{
		{"anchors", func(c *Checkpoint) { c.Anchors++ }, errs.CodeInvalidInput},
		{"records", func(c *Checkpoint) { c.Records-- }, errs.CodeInvalidInput},
		{"root", func(c *Checkpoint) { c.Root[0] ^= 1 }, errs.CodeHashMismatch},
		{"origin", func(c *Checkpoint) { c.Origin = "x" }, errs.CodeInvalidInput},
		{"year", func(c *Checkpoint) { c.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, errs.CodeInvalidInput},
		{"entry order", func(c *Checkpoint) { c.Entries[0], c.Entries[1] = c.Entries[1], c.Entries[0] }, errs.CodeInvalidInput},
	} {
		cp := *c
		cp.Entries = append([]Entry(nil), c.Entries...)
		bad.f(&cp)
		testutil.WantCode(t, cp.Validate(), bad.code)
		// Sign never signs it.
		skey, _, err := GenerateKeys("k")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Sign(cp.Marshal(), skey)
		if err == nil {
			t.Fatalf("%s: Sign signed an invalid checkpoint", bad.name)
		}
	}
	_, err := NewCheckpoint("db", testTime, []Entry{{Anchor: "a", Size: ^uint64(0), Root: recordHash(1)}, {Anchor: "b", Size: 1, Root: recordHash(2)}})
	testutil.WantCode(t, err, errs.CodeInvalidInput)
	_, err = NewCheckpoint("d b", testTime, nil)
	testutil.WantCode(t, err, errs.CodeInvalidInput)
	testutil.WantCode(t, (*Checkpoint)(nil).Validate(), errs.CodeInvalidInput)
}

func TestSignAndOpen(t *testing.T) {
	c, _ := sampleCheckpoint(t)
	skey, vkey, err := GenerateKeys("anchordb-test")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(skey, "PRIVATE+KEY+anchordb-test+") || !strings.HasPrefix(vkey, "anchordb-test+") {
		t.Fatalf("keys %q / %q", skey[:30], vkey)
	}
	body := c.Marshal()
	msg, err := Sign(body, skey+"\n")
	if err != nil {
		t.Fatal(err)
	}
	text, sigs, ok := bytes.Cut(msg, []byte("\n\n"))
	if !ok || !bytes.Equal(append(text, '\n'), body) {
		t.Fatalf("signed note does not start with the body followed by a blank line:\n%s", msg)
	}
	if !bytes.HasPrefix(sigs, []byte("— anchordb-test ")) || bytes.Count(sigs, []byte("\n")) != 1 {
		t.Fatalf("signature block %q", sigs)
	}
	got, err := OpenCheckpoint(msg, vkey+"\n")
	if err != nil {
		t.Fatal(err)
	}
	got.Time = c.Time
	if !reflect.DeepEqual(got, c) {
		t.Fatal("opened checkpoint differs from the signed one")
	}

	// A second, unrelated key among the verifiers does not hurt.
	_, vkey2, _ := GenerateKeys("other")
	if _, err := OpenCheckpoint(msg, vkey2, vkey); err != nil {
		t.Fatalf("with an extra verifier: %v", err)
	}
	if _, err := OpenCheckpoint(msg, vkey, vkey); err != nil {
		t.Fatalf("with the key given twice: %v", err)
	}

	// Note level tampering.
	skeyB, vkeyB, _ := GenerateKeys("anchordb-test") // same name, other key
	resigned, err := Sign(body, skeyB)
	if err != nil {
		t.Fatal(err)
	}
	forgedBody := bytes.Replace(msg, []byte("records "), []byte("records 1"), 1)
	flipped := append([]byte(nil), msg...)
	flipped[0] = 'X' // what the conformance script does
	sigLine := msg[bytes.LastIndex(msg, []byte("\n\n"))+2:]
	b64 := strings.TrimSuffix(strings.SplitN(string(sigLine), " ", 3)[2], "\n")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	raw[len(raw)-1] ^= 1
	badSig := bytes.Replace(msg, []byte(b64), []byte(base64.StdEncoding.EncodeToString(raw)), 1)
	truncated := bytes.Replace(msg, []byte(b64), []byte(b64[:len(b64)-8]), 1)
	truncatedHard := msg[:len(msg)-10]

	cases := []struct {
		name string
		msg  []byte
		keys []string
		code errs.Code
	}{
		{"forged body", forgedBody, []string{vkey}, errs.CodeSignatureInvalid},
		{"first byte changed", flipped, []string{vkey}, errs.CodeSignatureInvalid},
		{"re-signed with another key", resigned, []string{vkey}, errs.CodeSignatureInvalid},
		{"opened with the wrong key", msg, []string{vkeyB}, errs.CodeSignatureInvalid},
		{"opened with an unrelated key", msg, []string{vkey2}, errs.CodeSignatureInvalid},
		{"flipped signature bit", badSig, []string{vkey}, errs.CodeSignatureInvalid},
		{"truncated signature", truncated, []string{vkey}, errs.CodeSignatureInvalid},
		// Not a signed note at all: a malformed file (CONTRACT §8), not a bad signature.
		{"truncated note", truncatedHard, []string{vkey}, errs.CodeInvalidInput},
		{"truncated to 40 bytes", msg[:40], []string{vkey}, errs.CodeInvalidInput},
		{"body only", body, []string{vkey}, errs.CodeInvalidInput},
		{"empty", nil, []string{vkey}, errs.CodeInvalidInput},
		{"verifier key as the note", []byte(vkey + "\n"), []string{vkey}, errs.CodeInvalidInput},
		{"control character", append([]byte("\x01"), msg...), []string{vkey}, errs.CodeInvalidInput},
		{"signature line not base64", bytes.Replace(msg, []byte(b64), []byte("!!!!"), 1), []string{vkey}, errs.CodeInvalidInput},
		{"no keys", msg, nil, errs.CodeInvalidInput},
		{"malformed key", msg, []string{"not a key"}, errs.CodeInvalidInput},
		{"signer key as verifier", msg, []string{skey}, errs.CodeInvalidInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenCheckpoint(c.msg, c.keys...)
			testutil.WantCode(t, err, c.code)
			if c.code == errs.CodeSignatureInvalid {
				var e *errs.Error
				errors.As(err, &e)
				if e.Err == nil {
					t.Fatal("AUTH_003 without the note error as cause")
				}
			}
			if strings.Contains(fmt.Sprint(err), skey) {
				t.Fatal("error quotes the signer key")
			}
		})
	}

	// Signed but malformed body: the note verifies, the body does not parse.
	signer, _ := note.NewSigner(skey)
	junk, err := note.Sign(&note.Note{Text: "anchordb/db/blake3\nanchors x\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenCheckpoint(junk, vkey)
	testutil.WantCode(t, err, errs.CodeInvalidInput)
}

func TestSignRejects(t *testing.T) {
	c, _ := sampleCheckpoint(t)
	skey, vkey, _ := GenerateKeys("k")
	for _, bad := range []struct {
		name string
		body []byte
		key  string
	}{
		{"malformed body", []byte("hello\n"), skey},
		{"body without newline", bytes.TrimSuffix(c.Marshal(), []byte("\n")), skey},
		{"malformed key", c.Marshal(), "PRIVATE+KEY+k+00000000+AAAA"},
		{"verifier key", c.Marshal(), vkey},
		{"empty key", c.Marshal(), ""},
	} {
		_, err := Sign(bad.body, bad.key)
		testutil.WantCode(t, err, errs.CodeInvalidInput)
		if strings.Contains(fmt.Sprint(err), skey) {
			t.Fatalf("%s: error quotes the signer key", bad.name)
		}
	}
	for _, name := range []string{"", "a b", "a+b", "a\tb", "\xff"} {
		_, _, err := GenerateKeys(name)
		testutil.WantCode(t, err, errs.CodeInvalidInput)
	}
}

func TestCheckpointFrontierProofs(t *testing.T) {
	c, stores := sampleCheckpoint(t)
	skey, vkey, _ := GenerateKeys("k")
	msg, err := Sign(c.Marshal(), skey)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := OpenCheckpoint(msg, vkey)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range trickyIDs {
		p, err := c.ProveAnchor(id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Origin != c.Origin {
			t.Fatalf("origin %q", p.Origin)
		}
		if err := opened.VerifyAnchorProof(p); err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		// The anchor's own tree root is the one in the checkpoint, so an
		// inclusion proof at that size chains up to the signed root.
		st := stores[id]
		if st.Size() > 0 {
			ip, err := ProveInclusion(context.Background(), st, id, 1, st.Size(), recordHash(uint64(indexOf(id)*1000)))
			if err != nil {
				t.Fatal(err)
			}
			if ip.Root != p.AnchorRoot {
				t.Fatalf("%q: inclusion root %s, checkpoint %s", id, ip.Root, p.AnchorRoot)
			}
		}
	}
	other, _ := NewCheckpoint("db-1", testTime, []Entry{{Anchor: "a", Size: 1, Root: recordHash(1)}})
	p, _ := c.ProveAnchor("a")
	testutil.WantCode(t, other.VerifyAnchorProof(p), errs.CodeHashMismatch)
	_, err = c.ProveAnchor("missing")
	testutil.WantCode(t, err, errs.CodeDependencyMissing)
}

func indexOf(id string) int {
	for i, x := range trickyIDs {
		if x == id {
			return i
		}
	}
	return -1
}

func TestCheckConsistent(t *testing.T) {
	old, stores := sampleCheckpoint(t)
	// Grow every other anchor and add one.
	var entries []Entry
	for i, id := range trickyIDs {
		st := stores[id]
		if i%2 == 0 {
			for j := 0; j < 5; j++ {
				if err := st.Append(recordHash(uint64(900000 + i*10 + j))); err != nil {
					t.Fatal(err)
				}
			}
		}
		entries = append(entries, Entry{Anchor: id, Size: st.Size(), Root: st.Root()})
	}
	fresh := NewMemStore()
	_ = fresh.Append(recordHash(1))
	stores["new anchor"] = fresh
	entries = append(entries, Entry{Anchor: "new anchor", Size: 1, Root: fresh.Root()})
	newer, err := NewCheckpoint("db-1", testTime.Add(time.Hour), entries)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	prove := func(ctx context.Context, anchor string, oldSize, newSize uint64) ([][]byte, error) {
		calls++
		return Consistency(ctx, stores[anchor], oldSize, newSize)
	}
	if err := CheckConsistent(ctx, old, newer, prove); err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("no consistency proof was asked for")
	}
	if err := CheckConsistent(ctx, old, newer, nil); err != nil {
		t.Fatal(err)
	}
	if err := CheckConsistent(ctx, old, old, prove); err != nil {
		t.Fatal(err)
	}

	// A newer checkpoint that rewrote history of a grown anchor.
	forked := func(mutate func(es []Entry) []Entry) *Checkpoint {
		es := mutate(append([]Entry(nil), newer.Entries...))
		c, err := NewCheckpoint("db-1", testTime, es)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	grownIdx := -1
	sameIdx := -1
	for i, e := range newer.Entries {
		if o, ok := old.Entry(e.Anchor); ok && o.Size > 0 {
			if e.Size > o.Size && grownIdx < 0 {
				grownIdx = i
			}
			if e.Size == o.Size && sameIdx < 0 {
				sameIdx = i
			}
		}
	}
	if grownIdx < 0 || sameIdx < 0 {
		t.Fatal("test setup: no grown or unchanged anchor")
	}
	cases := []struct {
		name  string
		older *Checkpoint
		newer *Checkpoint
		prove ConsistencyProver
		code  errs.Code
	}{
		{"missing anchor", old, forked(func(es []Entry) []Entry { return append(es[:sameIdx], es[sameIdx+1:]...) }), prove, errs.CodeConflict},
		{"shrunk anchor", old, forked(func(es []Entry) []Entry {
			o, _ := old.Entry(es[grownIdx].Anchor)
			es[grownIdx].Size = o.Size - 1
			es[grownIdx].Root = recordHash(5)
			return es
		}), prove, errs.CodeConflict},
		{"equal-size fork", old, forked(func(es []Entry) []Entry { es[sameIdx].Root = recordHash(5); return es }), prove, errs.CodeConflict},
		{"grown with another root", old, forked(func(es []Entry) []Entry { es[grownIdx].Root = recordHash(5); return es }), prove, errs.CodeHashMismatch},
		{"prover fails", old, newer, func(context.Context, string, uint64, uint64) ([][]byte, error) {
			return nil, errs.New(errs.CodeDependencyMissing, "no such size")
		}, errs.CodeDependencyMissing},
		{"prover returns junk", old, newer, func(context.Context, string, uint64, uint64) ([][]byte, error) {
			return [][]byte{{1, 2}}, nil
		}, errs.CodeInvalidInput},
		{"reversed", newer, old, prove, errs.CodeConflict},
		{"other database", old, mustCheckpoint(t, "db-2", newer.Entries), prove, errs.CodeInvalidInput},
		{"nil", nil, newer, prove, errs.CodeInvalidInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testutil.WantCode(t, CheckConsistent(ctx, c.older, c.newer, c.prove), c.code)
		})
	}
	// With prove nil, a grown anchor with another root is not detectable.
	if err := CheckConsistent(ctx, old, cases[3].newer, nil); err != nil {
		t.Fatalf("without proofs: %v", err)
	}
}

func mustCheckpoint(t *testing.T, db string, entries []Entry) *Checkpoint {
	t.Helper()
	c, err := NewCheckpoint(db, testTime, entries)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The checkpoint's frontier leaf never equals a record-tree leaf.
func TestFrontierLeafLengthDiffers(t *testing.T) {
	leaf, err := FrontierLeaf(Entry{Anchor: "a", Size: 1, Root: recordHash(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf) == segment.HashSize || len(leaf) != 43 {
		t.Fatalf("shortest frontier leaf is %d bytes", len(leaf))
	}
}
