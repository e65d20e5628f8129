package segment

import (
	"bytes"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/zeebo/blake3"
	"pgregory.net/rapid"
)

// --- canonical encoding -----------------------------------------------------

// genText draws 1..maxLen bytes of valid UTF-8 without control characters:
// what CONTRACT §1 allows for anchor ids (255) and record types (64).
func genText(maxLen int) *rapid.Generator[string] {
	runes := rapid.OneOf(
		rapid.RuneFrom([]rune("abcxyz/.@-_ Ü€😀\u200b\u2028")),
		rapid.Rune(),
	).Filter(func(r rune) bool { return !unicode.IsControl(r) && utf8.ValidRune(r) })
	return rapid.StringOfN(runes, 1, -1, maxLen)
}

// genRecord draws a record that ValidateContent accepts under the default
// limits (sizes kept small so that many cases run; the limits themselves are
// covered by TestCanonicalRoundTripAtLimits).
func genRecord() *rapid.Generator[Record] {
	return rapid.Custom(func(t *rapid.T) Record {
		r := Record{
			Anchor:  genText(MaxAnchorID).Draw(t, "anchor"),
			Seq:     rapid.Uint64Min(1).Draw(t, "seq"),
			Counter: rapid.Uint64().Draw(t, "counter"),
			Time:    rapid.Int64().Draw(t, "time"),
			Type:    rapid.OneOf(rapid.SampledFrom([]string{TypePut, TypeDelete}), genText(MaxType)).Draw(t, "type"),
		}
		minKey := 0
		if r.IsKV() {
			minKey = 1
		}
		r.Key = rapid.SliceOfN(rapid.Byte(), minKey, 300).Draw(t, "key")
		if r.Type != TypeDelete {
			r.Value = rapid.SliceOfN(rapid.Byte(), 0, 2000).Draw(t, "value")
		}
		r.IdempotencyKey = rapid.SliceOfN(rapid.Byte(), 0, 256).Draw(t, "idem")
		copy(r.PrevHash[:], rapid.SliceOfN(rapid.Byte(), HashSize, HashSize).Draw(t, "prev"))
		return r
	})
}

func TestCanonicalRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRecord().Draw(t, "record")
		if err := ValidateContent(r.Anchor, r.Type, r.Key, r.Value, r.IdempotencyKey, DefaultLimits()); err != nil {
			t.Fatalf("generator made an invalid record: %v", err)
		}
		b1 := AppendCanonical(nil, &r)
		if want := canonicalPrefixSz + len(r.Anchor) + r.BodySize(); len(b1) != want {
			t.Fatalf("canonical encoding is %d bytes, want %d", len(b1), want)
		}
		d, err := DecodeCanonical(b1)
		if err != nil {
			t.Fatalf("DecodeCanonical of a fresh encoding: %v", err)
		}
		if !sameRecord(d, r) {
			t.Fatalf("decoded %+v, encoded %+v", d, r)
		}
		b2 := AppendCanonical(nil, &d)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b1, b2)
		}
		// Appending to a non-empty dst leaves the prefix alone.
		pre := []byte("prefix")
		b3 := AppendCanonical(append([]byte(nil), pre...), &r)
		if !bytes.Equal(b3[:len(pre)], pre) || !bytes.Equal(b3[len(pre):], b1) {
			t.Fatalf("AppendCanonical to a non-empty dst")
		}
		// The hash is the derive-key hash of exactly these bytes.
		want := deriveKey(ContextRecord, b1)
		if got := r.ComputeHash(); got != want {
			t.Fatalf("ComputeHash %s, derive-key over canonical bytes %s", got, want)
		}
		if got := d.ComputeHash(); got != want {
			t.Fatalf("hash of decoded record %s, want %s", got, want)
		}
		// A frame round trips too, and sets the hash.
		fr := r
		frame := AppendFrame(nil, &fr)
		if fr.Hash != want || len(frame) != r.FrameSize() {
			t.Fatalf("AppendFrame: hash %s (want %s), %d bytes (want %d)", fr.Hash, want, len(frame), r.FrameSize())
		}
		p, n, err := ParseFrame(r.Anchor, frame)
		if err != nil || n != len(frame) || !sameRecord(p, fr) {
			t.Fatalf("ParseFrame: %v, n=%d of %d, record %+v", err, n, len(frame), p)
		}
	})
}

func deriveKey(context string, b []byte) Hash {
	h := blake3.NewDeriveKey(context)
	_, _ = h.Write(b)
	var out Hash
	h.Sum(out[:0])
	return out
}

// TestCanonicalRoundTripAtLimits round-trips a record with every field at its
// CONTRACT §9 limit (and the type at the format's 64 bytes).
func TestCanonicalRoundTripAtLimits(t *testing.T) {
	l := DefaultLimits()
	r := Record{
		Anchor:         strings.Repeat("Ü", 127) + "a", // 255 bytes
		Seq:            ^uint64(0),
		Counter:        ^uint64(0),
		Time:           -1 << 63,
		Type:           strings.Repeat("T", MaxType),
		Key:            bytes.Repeat([]byte{0xAB}, l.MaxKey),
		Value:          bytes.Repeat([]byte{0xCD}, l.MaxValue),
		IdempotencyKey: bytes.Repeat([]byte{0xEF}, l.MaxIdempotencyKey),
		PrevHash:       hashOf(9),
	}
	if err := ValidateContent(r.Anchor, r.Type, r.Key, r.Value, r.IdempotencyKey, l); err != nil {
		t.Fatal(err)
	}
	b1 := AppendCanonical(nil, &r)
	d, err := DecodeCanonical(b1)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecord(d, r) {
		t.Fatal("decoded record differs")
	}
	if b2 := AppendCanonical(nil, &d); !bytes.Equal(b1, b2) {
		t.Fatal("re-encoding differs")
	}
}

// TestCanonicalLayout pins the byte layout documented in record.go, so a
// silent change of the format (and of every hash) fails here.
func TestCanonicalLayout(t *testing.T) {
	r := Record{
		Anchor: "ab", Seq: 1, Counter: 2, Time: 3, Type: "put",
		Key: []byte("k"), Value: []byte("vv"), IdempotencyKey: []byte("i"), PrevHash: hashOf(0x10),
	}
	want := "01" + "02" + hex.EncodeToString([]byte("ab")) +
		"0000000000000001" + "0000000000000002" + "0000000000000003" +
		"03" + hex.EncodeToString([]byte("put")) +
		"00000001" + hex.EncodeToString([]byte("k")) +
		"00000002" + hex.EncodeToString([]byte("vv")) +
		"0001" + hex.EncodeToString([]byte("i")) +
		hex.EncodeToString(r.PrevHash[:])
	if got := hex.EncodeToString(AppendCanonical(nil, &r)); got != want {
		t.Fatalf("canonical encoding\n got %s\nwant %s", got, want)
	}
	frame := AppendFrame(nil, &r)
	body := AppendBody(nil, &r)
	if be.Uint32(frame) != uint32(len(body)) || !bytes.Equal(frame[4:4+len(body)], body) ||
		!bytes.Equal(frame[4+len(body):], r.Hash[:]) || len(frame) != 4+len(body)+HashSize {
		t.Fatalf("frame is not bodyLen ‖ body ‖ hash: %x", frame)
	}
	if HashBody(r.Anchor, body) != r.ComputeHash() {
		t.Fatal("HashBody differs from ComputeHash")
	}
}

// TestHashCoversEveryField changes one field at a time; every change must
// change the hash (CONTRACT §2: the hash covers every field).
func TestHashCoversEveryField(t *testing.T) {
	base := Record{
		Anchor: "anchor-1", Seq: 7, Counter: 42, Time: 1_700_000_000_000_000_000, Type: TypePut,
		Key: []byte("key"), Value: []byte("value"), IdempotencyKey: []byte("idem"), PrevHash: hashOf(1),
	}
	baseHash := base.ComputeHash()
	cases := []struct {
		name   string
		mutate func(r *Record)
	}{
		{"anchor", func(r *Record) { r.Anchor = "anchor-2" }},
		{"anchor prefix", func(r *Record) { r.Anchor = "anchor-" }},
		{"seq", func(r *Record) { r.Seq++ }},
		{"counter", func(r *Record) { r.Counter++ }},
		{"time", func(r *Record) { r.Time++ }},
		{"time sign", func(r *Record) { r.Time = -r.Time }},
		{"type", func(r *Record) { r.Type = TypeDelete }},
		{"type event", func(r *Record) { r.Type = "PUT" }},
		{"key", func(r *Record) { r.Key = []byte("kez") }},
		{"key empty", func(r *Record) { r.Key = nil }},
		{"value", func(r *Record) { r.Value = []byte("valuf") }},
		{"value empty", func(r *Record) { r.Value = nil }},
		{"idempotency key", func(r *Record) { r.IdempotencyKey = []byte("idem2") }},
		{"idempotency key none", func(r *Record) { r.IdempotencyKey = nil }},
		{"prev_hash", func(r *Record) { r.PrevHash[31] ^= 1 }},
		// Bytes moved between adjacent variable fields: the length prefixes
		// must keep these apart.
		{"key/value boundary", func(r *Record) { r.Key, r.Value = []byte("keyv"), []byte("alue") }},
		{"value/idem boundary", func(r *Record) { r.Value, r.IdempotencyKey = []byte("valuei"), []byte("dem") }},
		{"type/key boundary", func(r *Record) { r.Type, r.Key = "putk", []byte("ey") }},
		{"anchor/body boundary", func(r *Record) { r.Anchor = "anchor-1\x00" }},
	}
	seen := map[Hash]string{baseHash: "base"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base.Clone()
			c.mutate(&r)
			h := r.ComputeHash()
			if h == baseHash {
				t.Fatalf("changing %s did not change the hash", c.name)
			}
			if other, dup := seen[h]; dup {
				t.Fatalf("changing %s gives the same hash as %s", c.name, other)
			}
			seen[h] = c.name
			// The stored Hash field is not an input.
			r2 := r
			r2.Hash = hashOf(0xEE)
			if r2.ComputeHash() != h {
				t.Fatal("ComputeHash depends on r.Hash")
			}
		})
	}
}

// TestHashDomainSeparation hashes the same bytes in every domain anchordb
// has; no two may agree (CONTRACT §2).
func TestHashDomainSeparation(t *testing.T) {
	r := testRecord("a", 1, GenesisHash("a"))
	canon := AppendCanonical(nil, &r)
	recHash := r.ComputeHash()
	mh := Blake3RFC6962
	outs := map[string]Hash{
		"record":            recHash,
		"genesis":           GenesisHash(string(canon)),
		"fingerprint":       Fingerprint(r.Type, r.Key, r.Value),
		"fingerprint raw":   Fingerprint("x", canon, nil),
		"header":            headerHashers.sum(canon),
		"seal":              sealHashers.sum(canon),
		"anchor path":       anchorPathHashers.sum(canon),
		"merkle leaf":       Hash(mh.HashLeaf(canon)),
		"merkle children":   Hash(mh.HashChildren(canon[:len(canon)/2], canon[len(canon)/2:])),
		"plain blake3":      blake3.Sum256(canon),
		"merkle empty":      Hash(mh.EmptyRoot()),
		"leaf of rec hash":  LeafHash(recHash),
		"genesis of anchor": GenesisHash(r.Anchor),
	}
	seen := map[Hash]string{}
	for name, h := range outs {
		if other, dup := seen[h]; dup {
			t.Errorf("%s and %s hash to the same %s", name, other, h)
		}
		seen[h] = name
	}
	// The contexts themselves must be distinct strings.
	ctxs := []string{ContextRecord, ContextGenesis, ContextHeader, ContextSeal, ContextFingerprint, ContextAnchorPath}
	set := map[string]bool{}
	for _, c := range ctxs {
		if set[c] {
			t.Errorf("context %q used twice", c)
		}
		set[c] = true
	}
	// Genesis hashes are per anchor.
	if GenesisHash("a") == GenesisHash("b") || GenesisHash("a") != GenesisHash("a") {
		t.Error("GenesisHash is not a function of the anchor id")
	}
	if GenesisHash("a") != deriveKey(ContextGenesis, []byte("a")) {
		t.Error("GenesisHash is not derive-key(ContextGenesis, anchor)")
	}
}

// TestFingerprint checks the idempotency fingerprint of CONTRACT §7: a function of
// (type, key, value) whose length prefixes keep shifted fields apart.
func TestFingerprint(t *testing.T) {
	base := Fingerprint("put", []byte("k"), []byte("v"))
	if base != Fingerprint("put", []byte("k"), []byte("v")) {
		t.Fatal("Fingerprint is not deterministic")
	}
	others := map[string]Hash{
		"type":      Fingerprint("delete", []byte("k"), []byte("v")),
		"key":       Fingerprint("put", []byte("K"), []byte("v")),
		"value":     Fingerprint("put", []byte("k"), []byte("V")),
		"shift k/v": Fingerprint("put", []byte("kv"), nil),
		"shift t/k": Fingerprint("pu", []byte("tk"), []byte("v")),
	}
	for name, h := range others {
		if h == base {
			t.Errorf("fingerprint does not change with %s", name)
		}
	}
}

// --- hash strings -------------------------------------------------------------

var hashRE = regexp.MustCompile(`^blake3:[0-9a-f]{64}$`)

func TestHashString(t *testing.T) {
	for _, h := range []Hash{{}, hashOf(0xA0), GenesisHash("x"), blake3.Sum256([]byte("abc"))} {
		s := h.String()
		if !hashRE.MatchString(s) {
			t.Fatalf("%q is not blake3:<64 lowercase hex>", s)
		}
		p, err := ParseHash(s)
		if err != nil || p != h {
			t.Fatalf("ParseHash(%q) = %s, %v", s, p, err)
		}
		txt, err := h.MarshalText()
		if err != nil || string(txt) != s {
			t.Fatalf("MarshalText = %q, %v", txt, err)
		}
		var u Hash
		if err := u.UnmarshalText(txt); err != nil || u != h {
			t.Fatalf("UnmarshalText: %s, %v", u, err)
		}
	}
	if (Hash{}).String() != "blake3:"+strings.Repeat("0", 64) {
		t.Fatal("zero hash string")
	}
	if !(Hash{}).IsZero() || hashOf(0).IsZero() {
		t.Fatal("IsZero")
	}
	if got := ShortHex(hashOf(0xA0), 4); got != "a0a1a2a3" {
		t.Fatalf("ShortHex = %q", got)
	}
}

func TestParseHashRejects(t *testing.T) {
	good := hashOf(0xA0).String()
	hexPart := strings.TrimPrefix(good, "blake3:")
	cases := map[string]string{
		"empty":            "",
		"prefix only":      "blake3:",
		"uppercase hex":    "blake3:" + strings.ToUpper(hexPart),
		"one upper digit":  "blake3:" + strings.ToUpper(hexPart[:1]) + hexPart[1:],
		"uppercase prefix": "BLAKE3:" + hexPart,
		"wrong prefix":     "sha256:" + hexPart,
		"no prefix":        hexPart,
		"no colon":         "blake3" + hexPart,
		"short":            good[:len(good)-1],
		"short by a byte":  good[:len(good)-2],
		"long":             good + "0",
		"long by a byte":   good + "00",
		"non-hex":          "blake3:" + strings.Repeat("g", 64),
		"space":            "blake3: " + hexPart[1:],
		"leading space":    " " + good,
		"trailing newline": good + "\n",
		"0x":               "blake3:0x" + hexPart[2:],
		"unicode":          "blake3:" + strings.Repeat("é", 32),
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			h, err := ParseHash(s)
			if err == nil {
				t.Fatalf("ParseHash(%q) accepted: %s", s, h)
			}
			if c := errs.CodeOf(err); c != errs.CodeInvalidInput {
				t.Fatalf("ParseHash(%q) code %q, want INPUT_001", s, c)
			}
			var u Hash
			if err := u.UnmarshalText([]byte(s)); err == nil {
				t.Fatalf("UnmarshalText(%q) accepted", s)
			}
		})
	}
}

// --- validation (CONTRACT §1, §9) -------------------------------------------------

func TestValidateAnchorID(t *testing.T) {
	valid := []string{
		"a", "../x", "a/b", ".", "..", "/", `\`, "user@host", "Ünïcode", "a b", " ", "😀",
		"CON", "x\u200by", // zero-width space: a format character, not a control character
		"x\u2028y",                     // line separator: Zl, not Cc
		strings.Repeat("a", 254),       // N-1
		strings.Repeat("a", 255),       // N
		strings.Repeat("Ü", 127) + "a", // N, multi-byte
	}
	for _, id := range valid {
		if err := ValidateAnchorID(id); err != nil {
			t.Errorf("ValidateAnchorID(%q) = %v, want valid", id, err)
		}
	}
	invalid := []struct {
		id   string
		want []string // substrings of the message
	}{
		{"", []string{"anchor id", "empty", "255"}},
		{strings.Repeat("a", 256), []string{"anchor id", "256", "limit 255"}}, // N+1
		{strings.Repeat("Ü", 128), []string{"anchor id", "256", "limit 255"}}, // N+1, multi-byte
		{strings.Repeat("a", 1000), []string{"anchor id", "1000", "limit 255"}},
		{"\x00", []string{"anchor id", "control character", "U+0000"}},
		{"a\nb", []string{"control character", "U+000A"}},
		{"a\tb", []string{"control character"}},
		{"a\rb", []string{"control character"}},
		{"\x1b[31mred", []string{"control character"}},
		{"a\x7f", []string{"control character", "U+007F"}},
		{"a\u0085b", []string{"control character", "U+0085"}},
		{"a\u009fb", []string{"control character"}},
		{"\xff", []string{"anchor id", "UTF-8"}},
		{"ab\xc3", []string{"UTF-8"}},           // truncated sequence
		{"\xc0\xaf", []string{"UTF-8"}},         // overlong '/'
		{"\xed\xa0\x80", []string{"UTF-8"}},     // surrogate half
		{"\xf4\x90\x80\x80", []string{"UTF-8"}}, // above U+10FFFF
		{strings.Repeat("a", 255) + "\x00", []string{"256"}},
	}
	for _, c := range invalid {
		err := ValidateAnchorID(c.id)
		checkRefusal(t, "ValidateAnchorID("+trunc(c.id)+")", err, c.want)
	}
}

func trunc(s string) string {
	q := strings.ReplaceAll(strings.ToValidUTF8(s, "\\x"), "\x00", `\0`)
	if len(q) > 24 {
		return q[:24] + "…"
	}
	return q
}

// checkRefusal asserts err is an INPUT_001 *errs.Error whose message holds
// every want substring.
func checkRefusal(t *testing.T, what string, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want INPUT_001", what)
		return
	}
	if c := errs.CodeOf(err); c != errs.CodeInvalidInput {
		t.Errorf("%s: code %q, want INPUT_001 (%v)", what, c, err)
	}
	if !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("%s: errors.Is(err, ErrInvalidInput) is false", what)
	}
	var e *errs.Error
	if errors.As(err, &e) && e.Reason() != "invalid_input" {
		t.Errorf("%s: reason %q", what, e.Reason())
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: message %q does not name %q", what, err.Error(), w)
		}
	}
}

func TestValidateContent(t *testing.T) {
	l := DefaultLimits()
	if l.MaxKey != 64<<10 || l.MaxValue != 16<<20 || l.MaxIdempotencyKey != 256 {
		t.Fatalf("DefaultLimits = %+v, CONTRACT §9 says 64 KiB / 16 MiB / 256", l)
	}
	if err := l.Validate(); err != nil {
		t.Fatalf("DefaultLimits invalid: %v", err)
	}
	n := func(k int) []byte { return bytes.Repeat([]byte{'x'}, k) }
	const ev = "TELEMETRY_UPDATE"
	cases := []struct {
		name             string
		anchor, typ      string
		key, value, idem []byte
		lim              *Limits
		want             []string // nil: valid
	}{
		{name: "put", anchor: "a", typ: TypePut, key: n(1), value: n(1)},
		{name: "put empty value", anchor: "a", typ: TypePut, key: n(1)},
		{name: "delete", anchor: "a", typ: TypeDelete, key: n(1)},
		{name: "event no key", anchor: "a", typ: ev, value: n(10)},
		{name: "event no key no value", anchor: "a", typ: ev},
		{name: "event with key", anchor: "a", typ: ev, key: n(3), value: n(3)},
		{name: "PUT is an event", anchor: "a", typ: "PUT"},
		{name: "Delete is an event", anchor: "a", typ: "Delete", value: n(3)},
		{name: "odd anchor", anchor: "../x", typ: TypePut, key: n(1)},

		{name: "anchor N-1", anchor: strings.Repeat("a", 254), typ: TypePut, key: n(1)},
		{name: "anchor N", anchor: strings.Repeat("a", 255), typ: TypePut, key: n(1)},
		{name: "anchor N+1", anchor: strings.Repeat("a", 256), typ: TypePut, key: n(1), want: []string{"anchor id", "limit 255"}},
		{name: "anchor empty", anchor: "", typ: TypePut, key: n(1), want: []string{"anchor id", "255"}},
		{name: "anchor control", anchor: "a\x00", typ: TypePut, key: n(1), want: []string{"anchor id", "control"}},

		{name: "key N-1", anchor: "a", typ: TypePut, key: n(l.MaxKey - 1)},
		{name: "key N", anchor: "a", typ: TypePut, key: n(l.MaxKey)},
		{name: "key N+1", anchor: "a", typ: TypePut, key: n(l.MaxKey + 1), want: []string{"key", "65537", "limit 65536"}},
		{name: "delete key N+1", anchor: "a", typ: TypeDelete, key: n(l.MaxKey + 1), want: []string{"key", "limit 65536"}},
		{name: "event key N+1", anchor: "a", typ: ev, key: n(l.MaxKey + 1), want: []string{"key", "limit 65536"}},

		{name: "value N-1", anchor: "a", typ: TypePut, key: n(1), value: n(l.MaxValue - 1)},
		{name: "value N", anchor: "a", typ: TypePut, key: n(1), value: n(l.MaxValue)},
		{name: "value N+1", anchor: "a", typ: TypePut, key: n(1), value: n(l.MaxValue + 1), want: []string{"value", "16777217", "limit 16777216"}},
		{name: "event value N", anchor: "a", typ: ev, value: n(l.MaxValue)},
		{name: "event value N+1", anchor: "a", typ: ev, value: n(l.MaxValue + 1), want: []string{"value", "limit 16777216"}},

		{name: "idem N-1", anchor: "a", typ: TypePut, key: n(1), idem: n(255)},
		{name: "idem N", anchor: "a", typ: TypePut, key: n(1), idem: n(256)},
		{name: "idem N+1", anchor: "a", typ: TypePut, key: n(1), idem: n(257), want: []string{"idempotency key", "257", "limit 256"}},

		{name: "type N-1", anchor: "a", typ: strings.Repeat("T", 63)},
		{name: "type N", anchor: "a", typ: strings.Repeat("T", 64)},
		{name: "type N+1", anchor: "a", typ: strings.Repeat("T", 65), want: []string{"record type", "65", "64"}},
		{name: "type empty", anchor: "a", typ: "", want: []string{"record type", "64"}},
		{name: "type control", anchor: "a", typ: "EV\n", want: []string{"record type", "control"}},
		{name: "type bad UTF-8", anchor: "a", typ: "EV\xff", want: []string{"record type", "UTF-8"}},

		{name: "put empty key", anchor: "a", typ: TypePut, value: n(1), want: []string{"put", "key", "65536"}},
		{name: "put zero-length key", anchor: "a", typ: TypePut, key: []byte{}, want: []string{"put", "key"}},
		{name: "delete empty key", anchor: "a", typ: TypeDelete, want: []string{"delete", "key"}},
		{name: "delete with value", anchor: "a", typ: TypeDelete, key: n(1), value: n(1), want: []string{"delete", "no value"}},

		{name: "custom key limit", anchor: "a", typ: TypePut, key: n(11), lim: &Limits{MaxKey: 10, MaxValue: 10, MaxIdempotencyKey: 10}, want: []string{"key", "limit 10"}},
		{name: "custom value limit", anchor: "a", typ: TypePut, key: n(1), value: n(11), lim: &Limits{MaxKey: 10, MaxValue: 10, MaxIdempotencyKey: 10}, want: []string{"value", "limit 10"}},
		{name: "custom idem limit", anchor: "a", typ: TypePut, key: n(1), idem: n(11), lim: &Limits{MaxKey: 10, MaxValue: 10, MaxIdempotencyKey: 10}, want: []string{"idempotency key", "limit 10"}},
		{name: "custom limits at N", anchor: "a", typ: TypePut, key: n(10), value: n(10), idem: n(10), lim: &Limits{MaxKey: 10, MaxValue: 10, MaxIdempotencyKey: 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lim := l
			if c.lim != nil {
				lim = *c.lim
			}
			err := ValidateContent(c.anchor, c.typ, c.key, c.value, c.idem, lim)
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			checkRefusal(t, c.name, err, c.want)
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	cases := []struct {
		l  Limits
		ok bool
	}{
		{DefaultLimits(), true},
		{Limits{MaxKey: 1, MaxValue: 0, MaxIdempotencyKey: 1}, true},
		{Limits{MaxKey: MaxFormatKey, MaxValue: MaxFormatValue, MaxIdempotencyKey: MaxFormatIdemKey}, true},
		{Limits{MaxKey: 0, MaxValue: 1, MaxIdempotencyKey: 1}, false},
		{Limits{MaxKey: MaxFormatKey + 1, MaxValue: 1, MaxIdempotencyKey: 1}, false},
		{Limits{MaxKey: 1, MaxValue: -1, MaxIdempotencyKey: 1}, false},
		{Limits{MaxKey: 1, MaxValue: MaxFormatValue + 1, MaxIdempotencyKey: 1}, false},
		{Limits{MaxKey: 1, MaxValue: 1, MaxIdempotencyKey: 0}, false},
		{Limits{MaxKey: 1, MaxValue: 1, MaxIdempotencyKey: MaxFormatIdemKey + 1}, false},
		// The idempotency key length is a u16 on disk and the type length a u8.
		{Limits{MaxKey: 1, MaxValue: 1, MaxIdempotencyKey: 1 << 16}, false},
	}
	for _, c := range cases {
		err := c.l.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", c.l, err, c.ok)
		}
		if err != nil && errs.CodeOf(err) != errs.CodeInvalidInput {
			t.Errorf("%+v.Validate() code %q", c.l, errs.CodeOf(err))
		}
	}
	// Every limit the format allows must fit its length field.
	if MaxFormatIdemKey > 0xFFFF || MaxType > 0xFF || MaxAnchorID > 0xFF || MaxFrameBody > maxFrameBody {
		t.Fatal("a format maximum does not fit its length field")
	}
}

// --- DecodeBody / DecodeCanonical refusals -----------------------------------

func TestDecodeRejects(t *testing.T) {
	good := testRecord("a", 1, GenesisHash("a"))
	canon := AppendCanonical(nil, &good)
	enc := func(mut func(r *Record)) []byte {
		r := good.Clone()
		mut(&r)
		return AppendCanonical(nil, &r)
	}
	cases := map[string][]byte{
		"empty":               nil,
		"one byte":            {FormatVersion},
		"version 0":           append([]byte{0}, canon[1:]...),
		"version 2":           append([]byte{2}, canon[1:]...),
		"anchor len 0":        append([]byte{FormatVersion, 0}, canon[3:]...),
		"anchor runs past":    {FormatVersion, 200, 'a'},
		"anchor control":      enc(func(r *Record) { r.Anchor = "a\n" }),
		"anchor bad utf8":     enc(func(r *Record) { r.Anchor = "\xff" }),
		"seq 0":               enc(func(r *Record) { r.Seq = 0 }),
		"type empty":          enc(func(r *Record) { r.Type = "" }),
		"type too long":       enc(func(r *Record) { r.Type = strings.Repeat("t", 65) }),
		"type control":        enc(func(r *Record) { r.Type = "\x00" }),
		"type bad utf8":       enc(func(r *Record) { r.Type = "\xfe" }),
		"put no key":          enc(func(r *Record) { r.Type, r.Key = TypePut, nil }),
		"delete no key":       enc(func(r *Record) { r.Type, r.Key = TypeDelete, nil }),
		"trailing byte":       append(append([]byte(nil), canon...), 0),
		"missing byte":        canon[:len(canon)-1],
		"body short of fixed": canon[:2+1+bodyFixed-1],
	}
	// Length fields that run past the body.
	aLen := 1
	body := canon[2+aLen:]
	tPos := 24
	kPos := tPos + 1 + int(body[tPos])
	for name, pos := range map[string]int{"type len": tPos, "key len": kPos} {
		b := append([]byte(nil), canon...)
		if name == "type len" {
			b[2+aLen+pos] = 0xFF
		} else {
			be.PutUint32(b[2+aLen+pos:], 0x7FFFFFFF)
		}
		cases[name+" runs past"] = b
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := DecodeCanonical(b)
			if err == nil {
				t.Fatalf("DecodeCanonical accepted %x as %+v", b, r)
			}
			if errs.CodeOf(err) != errs.CodeInvalidInput {
				t.Fatalf("code %q, want INPUT_001 (%v)", errs.CodeOf(err), err)
			}
		})
	}
}

// TestDecodeBodyAliases documents that DecodeBody copies nothing and Clone
// copies everything.
func TestDecodeBodyAliases(t *testing.T) {
	r := testRecord("a", 1, GenesisHash("a"))
	body := AppendBody(nil, &r)
	d, err := DecodeBody("a", body)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Clone()
	for i := range body {
		body[i] ^= 0xFF
	}
	if bytes.Equal(d.Key, r.Key) {
		t.Error("DecodeBody's key does not alias the body (documented as aliasing)")
	}
	if !bytes.Equal(c.Key, r.Key) || !bytes.Equal(c.Value, r.Value) || !bytes.Equal(c.IdempotencyKey, r.IdempotencyKey) {
		t.Error("Clone shares memory with the body")
	}
	// Appending to a decoded slice must not overwrite the next field.
	body2 := AppendBody(nil, &r)
	d2, _ := DecodeBody("a", body2)
	_ = append(d2.Key, 'Z')
	if d3, err := DecodeBody("a", body2); err != nil || !sameRecord(d3, d2) {
		t.Error("append to a decoded key overwrote the body")
	}
}
