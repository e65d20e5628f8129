package engine

import (
	"context"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"

	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/journal"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
)

// docs/FORMAT.md says its examples "were produced by running the engine, not
// typed by hand". These tests hold it to that: they run the engine on the
// document's worked example and compare what it writes with the document's
// hex dumps and test vectors, so a change of the format that forgets the
// document (or an edit of the document that forgets the format) fails here.

func readFormatDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docSection returns the text of the section whose heading starts with
// heading, up to the next heading of any level.
func docSection(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		t.Fatalf("FORMAT.md has no section %q", heading)
	}
	s := doc[i+1:]
	s = s[strings.IndexByte(s, '\n')+1:]
	if j := regexp.MustCompile(`(?m)^#{2,3} `).FindStringIndex(s); j != nil {
		s = s[:j[0]]
	}
	return s
}

var dumpLine = regexp.MustCompile(`^(?:([0-9a-f]{4})  )?\s*((?:[0-9a-f]{2} )*[0-9a-f]{2})(?:  .*)?$`)

// hexDump returns the bytes of the first fenced block of section, read as a
// hex dump: an optional 4-digit offset, bytes as two hex digits separated by
// single spaces, then two or more spaces and a comment. An offset must be
// where the bytes before it end.
func hexDump(t *testing.T, section string) []byte {
	t.Helper()
	i := strings.Index(section, "```\n")
	if i < 0 {
		t.Fatal("section has no fenced block")
	}
	body := section[i+4:]
	body = body[:strings.Index(body, "```")]
	var out []byte
	for n, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		m := dumpLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("dump line %d is not offset/bytes/comment: %q", n+1, line)
		}
		if m[1] != "" {
			off, _ := strconv.ParseUint(m[1], 16, 32)
			if int(off) != len(out) {
				t.Fatalf("dump line %d says offset %#x; the bytes before it end at %#x", n+1, off, len(out))
			}
		}
		b, err := hex.DecodeString(strings.ReplaceAll(m[2], " ", ""))
		if err != nil {
			t.Fatalf("dump line %d: %v", n+1, err)
		}
		out = append(out, b...)
	}
	return out
}

var hexTokens = regexp.MustCompile(`^(?:[0-9a-f]{2})+(?: (?:[0-9a-f]{2})+)*$`)

// indexRowsOf reads the rows of FORMAT.md §6.8's example: hex key and value
// by key. A row is "key" and hex groups, then "val" and hex groups, each
// group run possibly continued on the following lines; runs of text that are
// not all hex (the annotations) are skipped. Two or more spaces separate runs.
func indexRowsOf(t *testing.T, section string) map[string]string {
	t.Helper()
	i := strings.Index(section, "```\n")
	body := section[i+4:]
	body = body[:strings.Index(body, "```")]
	rows := map[string]string{}
	var key, val *strings.Builder
	cur := (*strings.Builder)(nil)
	flush := func() {
		if key != nil {
			rows[key.String()] = val.String()
		}
	}
	for _, line := range strings.Split(body, "\n") {
		for _, run := range regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1) {
			switch {
			case strings.HasPrefix(run, "key "):
				flush()
				key, val = &strings.Builder{}, &strings.Builder{}
				cur, run = key, run[4:]
			case strings.HasPrefix(run, "val "):
				cur, run = val, run[4:]
			}
			if cur != nil && hexTokens.MatchString(run) {
				cur.WriteString(strings.ReplaceAll(run, " ", ""))
			}
		}
	}
	flush()
	if len(rows) == 0 {
		t.Fatal("FORMAT.md §6.8 has no rows")
	}
	return rows
}

func compareDump(t *testing.T, what string, doc, got []byte) {
	t.Helper()
	if slices.Equal(doc, got) {
		return
	}
	for i := range min(len(doc), len(got)) {
		if doc[i] != got[i] {
			t.Errorf("%s: FORMAT.md's dump differs from what the engine writes at byte %#x (doc %02x, engine %02x); %d bytes in the doc, %d written\nengine:\n%s",
				what, i, doc[i], got[i], len(doc), len(got), hex.Dump(got))
			return
		}
	}
	t.Errorf("%s: FORMAT.md's dump has %d bytes, the engine wrote %d\nengine:\n%s", what, len(doc), len(got), hex.Dump(got))
}

// formatExampleTime is the time of FORMAT.md §3.4's record.
var formatExampleTime = time.Unix(0, 1769860800000000001).UTC()

// formatExampleDBID is the database id of FORMAT.md §6.8.
const formatExampleDBID = "c0c2e6eb43df7bcf365e97034d1e0e7f"

func docReadFile(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFormatDocWorkedExample appends FORMAT.md §3.4's record to a fresh
// database and compares the segment (§4.7), the journal block (§5.5), the
// index rows (§6.8) and the snapshot (§7.6) with the document's bytes.
func TestFormatDocWorkedExample(t *testing.T) {
	doc := readFormatDoc(t)
	ctx := context.Background()
	fs := vfs.NewMem()
	if err := fs.MkdirAll("db", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("db/"+IDFile, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte(formatExampleDBID + "\n"))
	_ = f.Close()
	opts := Options{FS: fs, Clock: func() time.Time { return formatExampleTime }}
	db := mustOpen(t, fs, opts)
	r, err := db.Append(ctx, Entry{Anchor: "device-17", Type: "put", Key: []byte("firmware"),
		Value: []byte("2.4.1"), IdempotencyKey: []byte("msg-8812")})
	if err != nil {
		t.Fatal(err)
	}

	// §3.4 in prose.
	sec := docSection(t, doc, "### 3.4")
	for _, want := range []string{
		"| record hash | `" + r.Hash.String() + "` |",
		"| prev_hash | genesis(`device-17`) = `" + segment.GenesisHash("device-17").String() + "` |",
		"| fingerprint | `" + segment.Fingerprint("put", []byte("firmware"), []byte("2.4.1")).String() + "` |",
		fmt.Sprintf("| time | %d = `%#x` |", formatExampleTime.UnixNano(), formatExampleTime.UnixNano()),
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("FORMAT.md §3.4 lacks %q", want)
		}
	}

	// §4.7: the whole segment file.
	segPath := fs.PathJoin(segment.AnchorDir(fs, "db", "device-17"), segment.FileName(1))
	if want := "`anchors/08/b51b54d71c0382fbc094b8a74b5592/0000000000000001.seg`"; !strings.Contains(doc, want) ||
		segPath != "db/anchors/08/b51b54d71c0382fbc094b8a74b5592/0000000000000001.seg" {
		t.Errorf("segment path %s, FORMAT.md §4.7 names %s", segPath, want)
	}
	// §5.5: the first block of the first journal file (zeros follow it),
	// read before Close settles the journal away.
	jf := docReadFile(t, fs, fs.PathJoin("db", JournalDir, journal.FileName(1)))
	block := hexDump(t, docSection(t, doc, "### 5.5"))
	if len(jf) < len(block) {
		t.Fatalf("journal file of %d bytes, shorter than §5.5's block", len(jf))
	}
	compareDump(t, "§5.5 journal block", block, jf[:len(block)])
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	seg := docReadFile(t, fs, segPath)
	compareDump(t, "§4.7 segment", hexDump(t, docSection(t, doc, "### 4.7")), seg)

	// §6.8: the index rows after a clean close, read with a plain Pebble
	// (no custom comparer or merger, as §6 says), are exactly the example's.
	rowsDoc := docSection(t, doc, "### 6.8")
	docRows := indexRowsOf(t, rowsDoc[:strings.Index(rowsDoc, "After 300 puts")])
	idx, err := pebble.Open(fs.PathJoin("db", IndexDir), &pebble.Options{FS: fs, ReadOnly: true, Logger: pebbleLogger{l: nopLogger{}}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := idx.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		rows[hex.EncodeToString(it.Key())] = hex.EncodeToString(it.Value())
	}
	_ = it.Close()
	_ = idx.Close()
	for k, v := range rows {
		if dv, ok := docRows[k]; !ok {
			t.Errorf("index row %s = %s is not in FORMAT.md §6.8", k, v)
		} else if dv != v {
			t.Errorf("index row %s: FORMAT.md §6.8 says %s, the engine wrote %s", k, dv, v)
		}
	}
	for k := range docRows {
		if _, ok := rows[k]; !ok {
			t.Errorf("FORMAT.md §6.8 lists row %s, which the engine did not write", k)
		}
	}

	// §7.6: the snapshot of this state under the default policy.
	db = mustOpen(t, fs, opts)
	defer db.Close()
	info, err := db.CreateSnapshot(ctx, snapshot.DefaultPolicy().PolicyRef())
	if err != nil {
		t.Fatal(err)
	}
	sec = docSection(t, doc, "### 7.6")
	if !strings.Contains(sec, "`"+info.Name+"`") {
		t.Errorf("snapshot named %s; FORMAT.md §7.6 names another", info.Name)
	}
	compareDump(t, "§7.6 snapshot", hexDump(t, sec), docReadFile(t, fs, info.Path))
}

// TestFormatDocVectors checks the appendix's test vectors and that §2.1 and
// the appendix list exactly the derive-key contexts the code defines.
func TestFormatDocVectors(t *testing.T) {
	doc := readFormatDoc(t)
	contexts := []string{
		segment.ContextRecord, segment.ContextGenesis, segment.ContextHeader, segment.ContextSeal,
		segment.ContextStub, segment.ContextFingerprint, segment.ContextAnchorPath,
		snapshot.ContextState, snapshot.ContextHeader, snapshot.ContextFooter, snapshot.ContextFile,
		snapshot.ContextAuditLine, merge.ContextFrontier,
	}
	inDoc := func(section string) []string {
		var out []string
		for _, m := range regexp.MustCompile("(?m)^\\| `(anchordb [^`]*)` \\|").FindAllStringSubmatch(section, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return out
	}
	want := slices.Sorted(slices.Values(contexts))
	if got := inDoc(docSection(t, doc, "### 2.1")); !slices.Equal(got, want) {
		t.Errorf("FORMAT.md §2.1 lists contexts %q; the code defines %q", got, want)
	}
	appendix := docSection(t, doc, "## Appendix")
	if got := inDoc(appendix); !slices.Equal(got, want) {
		t.Errorf("FORMAT.md's appendix lists contexts %q; the code defines %q", got, want)
	}
	for _, c := range contexts {
		var h [32]byte
		blake3.DeriveKey(c, []byte("abc"), h[:])
		if row := fmt.Sprintf("| `%s` | `%x` |", c, h); !strings.Contains(appendix, row) {
			t.Errorf("FORMAT.md's appendix lacks %s", row)
		}
	}

	leaf := segment.Blake3RFC6962.HashLeaf(make([]byte, 32))
	state := snapshot.NewStateHasher()
	_ = state.Add([]byte("firmware"), []byte("2.4.1"))
	empty := snapshot.NewStateHasher()
	truncate := snapshot.DefaultPolicy()
	truncate.RawLog = snapshot.RawLogTruncate
	b3 := blake3.Sum256(nil)
	for _, row := range []struct{ label, value string }{
		{"genesis(`device-17`)", "`" + segment.GenesisHash("device-17").String() + "`"},
		{"genesis(`a`)", "`" + segment.GenesisHash("a").String() + "`"},
		{"genesis(`../x`)", "`" + segment.GenesisHash("../x").String() + "`"},
		{"path id(`device-17`)", "`" + segment.AnchorPathID("device-17") + "`"},
		{"path id(`a`)", "`" + segment.AnchorPathID("a") + "`"},
		{"path id(`../x`)", "`" + segment.AnchorPathID("../x") + "`"},
		{"fingerprint(`put`, `firmware`, `2.4.1`)", "`" + segment.Fingerprint("put", []byte("firmware"), []byte("2.4.1")).String() + "`"},
		{"`B3(\"\")` (empty tree)", "`" + segment.Hash(b3).String() + "`"},
		{"leaf hash of 32 zero bytes, `B3(0x00 ‖ 00…00)`", fmt.Sprintf("`blake3:%x`", leaf)},
		{"state hash of `{firmware: 2.4.1}`", "`" + state.Sum().String() + "`"},
		{"state hash of the empty state", "`" + empty.Sum().String() + "`"},
		{"default `policy_ref`", "`" + snapshot.DefaultPolicy().PolicyRef() + "`"},
	} {
		if want := "| " + row.label + " | " + row.value + " |"; !strings.Contains(appendix, want) {
			t.Errorf("FORMAT.md's appendix lacks %s", want)
		}
	}
	sec8 := docSection(t, doc, "## 8.")
	for _, want := range []string{
		string(snapshot.DefaultPolicy().Canonical()) + "\npolicy_ref = " + snapshot.DefaultPolicy().PolicyRef(),
		"`\"raw_log\":\"truncate\"`:\n`" + truncate.PolicyRef() + "`",
	} {
		if !strings.Contains(sec8, want) {
			t.Errorf("FORMAT.md §8 lacks %q", want)
		}
	}
}

// TestFormatDocSizes checks the fixed sizes FORMAT.md states against the
// encoders' constants.
func TestFormatDocSizes(t *testing.T) {
	doc := readFormatDoc(t)
	r := segment.Record{Anchor: "device-17", Seq: 1, Counter: 1, Type: "put", Key: []byte("k")}
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"body fixed bytes (§3.1: body size = 67 + t + k + v + i)", r.BodySize() - len("put") - 1, 67},
		{"frame overhead (§4.3: L + 36)", r.FrameSize() - r.BodySize(), 36},
		{"segment header (§4.2: 90 + n)", segment.HeaderSize("device-17") - len("device-17"), 90},
		{"seal (§4.4: 84 bytes)", segment.FooterSize, 84},
		{"MaxFrameBody (§3.1: 553,652,355)", segment.MaxFrameBody, 553652355},
		{"journal block header (§5.2: 8 bytes)", journal.HeaderSize, 8},
		{"journal block bound (§5.2: 2^30)", journal.MaxPayload, 1 << 30},
		{"s row value (§6.3: 60 bytes)", schema.LocationSize, 60},
		{"i row value (§6.4: 80 bytes)", schema.IdemSize, 80},
		{"k row fixed value (§6.5: value at offset 70)", schema.VersionFixed, 70},
		{"index format (§6.7: mformat = 2)", schema.Format, 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: the code has %d", c.what, c.got)
		}
	}
	if !strings.Contains(doc, "| `mformat` | `u64` = 2 |") {
		t.Errorf("FORMAT.md §6.7 no longer says mformat = 2")
	}
	for tag, name := range map[byte]string{schema.TagAnchor: "a", schema.TagIdem: "i", schema.TagKey: "k", schema.TagMeta: "m", schema.TagNode: "n", schema.TagKept: "r", schema.TagSeq: "s"} {
		if want := fmt.Sprintf("| `%s` 0x%02x |", name, tag); !strings.Contains(doc, want) {
			t.Errorf("FORMAT.md §6 lacks the table tag row %s", want)
		}
	}
}

// TestFormatDocIndexTables checks that FORMAT.md §6's table of tags, the
// row table in engine/internal/schema's package doc and the schema's tag
// constants name the same tables, and that §6.7 lists exactly the schema's
// meta rows: the code's summary and the document cannot drift apart.
func TestFormatDocIndexTables(t *testing.T) {
	doc := readFormatDoc(t)
	docTags := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(.)` 0x[0-9a-f]{2} \\|").FindAllStringSubmatch(docSection(t, doc, "## 6."), -1) {
		docTags[m[1]] = true
	}
	pkgDoc, err := os.ReadFile("internal/schema/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	codeDocTags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^//\t'(.)'  `).FindAllStringSubmatch(string(pkgDoc), -1) {
		codeDocTags[m[1]] = true
	}
	codeTags := map[string]bool{}
	for _, tag := range []byte{schema.TagAnchor, schema.TagIdem, schema.TagKey, schema.TagMeta, schema.TagNode, schema.TagKept, schema.TagSeq} {
		codeTags[string(tag)] = true
	}
	if !maps.Equal(docTags, codeTags) || !maps.Equal(codeDocTags, codeTags) {
		t.Errorf("table tags: FORMAT.md §6 %v, schema's package doc %v, schema's constants %v", slices.Sorted(maps.Keys(docTags)),
			slices.Sorted(maps.Keys(codeDocTags)), slices.Sorted(maps.Keys(codeTags)))
	}

	docMeta := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `m([a-z_]+)` \\|").FindAllStringSubmatch(docSection(t, doc, "### 6.7"), -1) {
		docMeta[m[1]] = true
	}
	codeMeta := map[string]bool{}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "internal/schema/meta.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if strings.HasPrefix(n.Name, "Meta") && i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							name, _ := strconv.Unquote(lit.Value)
							codeMeta[name] = true
						}
					}
				}
			}
		}
	}
	if len(codeMeta) == 0 || !maps.Equal(docMeta, codeMeta) {
		t.Errorf("meta rows: FORMAT.md §6.7 %v, schema's Meta* names %v", slices.Sorted(maps.Keys(docMeta)), slices.Sorted(maps.Keys(codeMeta)))
	}
}

// TestFormatDocCheckpointsAndProofs checks §10: the example checkpoint body
// and its signature, the frontier leaf, the frontier encodings and the proof
// JSON examples.
func TestFormatDocCheckpointsAndProofs(t *testing.T) {
	doc := readFormatDoc(t)
	sec := docSection(t, doc, "### 10.1")
	fences := regexp.MustCompile("(?s)```\n(.*?)```").FindAllStringSubmatch(sec, -1)
	if len(fences) < 2 {
		t.Fatal("FORMAT.md §10.1 lost its example body or signed note")
	}
	body := fences[0][1]
	recordHash, err := segment.ParseHash("blake3:9376796df9090780d9509edfa98e6e2de29c6fbe680319150b57e315b41fb226")
	if err != nil {
		t.Fatal(err)
	}
	var root segment.Hash
	copy(root[:], segment.Blake3RFC6962.HashLeaf(recordHash[:]))
	if !strings.Contains(docSection(t, doc, "## Appendix"), "| anchor root of §3.4's anchor at size 1 | `"+root.String()+"` |") {
		t.Errorf("the appendix's anchor root at size 1 is not %s", root)
	}
	cp, err := proof.NewCheckpoint("8adc197250ad785cc77650b30ad32779", time.Date(2026, 1, 31, 12, 0, 0, 500000000, time.UTC),
		[]proof.Entry{{Anchor: "device-17", Size: 1, Root: root}, {Anchor: `say "hi"`, Size: 0, Root: segment.Hash(blake3.Sum256(nil))}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cp.Marshal()); got != body {
		t.Errorf("FORMAT.md §10.1's body:\n%s\nthe code marshals:\n%s", body, got)
	}
	sig := regexp.MustCompile(`(?m)^— anchordb-demo \S+$`).FindString(fences[1][1])
	vkey := regexp.MustCompile("verifier key `(anchordb-demo\\+[^`]+)`").FindStringSubmatch(sec)
	if sig == "" || vkey == nil {
		t.Fatal("FORMAT.md §10.1 lost its signature line or verifier key")
	}
	if _, err := proof.OpenCheckpoint([]byte(body+"\n"+sig+"\n"), vkey[1]); err != nil {
		t.Errorf("FORMAT.md §10.1's signed note does not open with its verifier key: %v", err)
	}

	leaf, err := proof.FrontierLeaf(cp.Entries[0])
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("`%04x %x %016x %x…%x`", len("device-17"), "device-17", 1, root[:4], root[28:])
	if !strings.Contains(docSection(t, doc, "### 10.2"), want) || len(leaf) != 2+9+8+32 ||
		!strings.HasPrefix(hex.EncodeToString(leaf), strings.NewReplacer("`", "", " ", "").Replace(want[:strings.Index(want, "…")])) {
		t.Errorf("FrontierLeaf is %x; FORMAT.md §10.2 should show %s", leaf, want)
	}

	f := merge.Frontier{"a": 3, "b/c": 7}
	js, _ := f.MarshalJSON()
	bin, _ := f.MarshalBinary()
	h, _ := f.Hash()
	spaced := fmt.Sprintf("%x %x %x %x %x %x %x", bin[:4], bin[4:5], bin[5:6], bin[6:14], bin[14:15], bin[15:18], bin[18:])
	sec = docSection(t, doc, "### 10.3")
	for _, w := range []string{"`" + string(js) + "` ↔\n`" + spaced + "`", "`" + h.String() + "`"} {
		if !strings.Contains(sec, w) {
			t.Errorf("FORMAT.md §10.3 lacks %s", w)
		}
	}

	sec = docSection(t, doc, "### 10.4")
	examples := regexp.MustCompile("(?m)^```\n(\\{.*\\})\n```").FindAllStringSubmatch(sec, -1)
	if len(examples) != 3 {
		t.Fatalf("FORMAT.md §10.4 has %d JSON examples, want 3", len(examples))
	}
	for _, ex := range examples {
		if _, err := proof.VerifyJSON([]byte(ex[1])); err != nil {
			t.Errorf("FORMAT.md §10.4's example does not verify: %v\n%s", err, ex[1])
		}
	}
}

// TestFormatDocAuditLines checks that §9's two example lines are a valid
// audit log: each line's hash is over its bytes before `,"hash":`, and the
// second links to the first.
func TestFormatDocAuditLines(t *testing.T) {
	sec := docSection(t, readFormatDoc(t), "## 9.")
	lines := regexp.MustCompile("(?m)^\\{\"seq\":.*\\}$").FindAllString(sec, -1)
	if len(lines) != 2 {
		t.Fatalf("FORMAT.md §9 has %d example lines, want 2", len(lines))
	}
	fs := vfs.NewMem()
	f, err := fs.Create("audit.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte(strings.Join(lines, "\n") + "\n"))
	_ = f.Close()
	head, err := snapshot.VerifyAudit(fs, "audit.log")
	if err != nil {
		t.Fatalf("FORMAT.md §9's example lines do not verify: %v", err)
	}
	if head.Lines != 2 {
		t.Errorf("FORMAT.md §9's example verifies as %d lines", head.Lines)
	}
}
