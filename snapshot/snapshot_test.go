package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/blake3"
)

const testRef = "blake3:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 5, 3000} {
		fs := vfs.NewMem()
		fr, entries := testState(n)
		meta := Meta{Frontier: fr, PolicyRef: testRef, Created: testCreated}
		info := mustCreate(t, fs, "db/snapshots", meta, entries)
		if info.Entries != uint64(n) || !info.Created.Equal(testCreated) || info.PolicyRef != testRef {
			t.Fatalf("n=%d: Create info %+v", n, info)
		}
		if want := FileName(testCreated, info.FileHash); info.Name != want || info.Path != "db/snapshots/"+want {
			t.Fatalf("name %s path %s, want %s", info.Name, info.Path, want)
		}
		sh := NewStateHasher()
		for _, e := range entries {
			if err := sh.Add(e.Key, e.Value); err != nil {
				t.Fatal(err)
			}
		}
		if info.StateHash != sh.Sum() {
			t.Fatalf("state hash %s, want %s", info.StateHash, sh.Sum())
		}

		v, err := Verify(fs, info.Path)
		if err != nil {
			t.Fatalf("n=%d: verify: %v", n, err)
		}
		if !v.Verified || v.FileHash != info.FileHash || v.Size != info.Size || v.RawSize != info.RawSize {
			t.Fatalf("verify info %+v, create info %+v", v, info)
		}
		if len(v.Frontier) != len(fr) || v.Frontier["é"] != fr["é"] {
			t.Fatalf("frontier %v, want %v", v.Frontier, fr)
		}
		s, err := Open(fs, info.Path)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for e, err := range s.Entries() {
			if err != nil {
				t.Fatal(err)
			}
			w := entries[i]
			if !bytes.Equal(e.Key, w.Key) || !bytes.Equal(e.Value, w.Value) || e.Version != w.Version {
				t.Fatalf("entry %d: got %q=%q %+v, want %q=%q %+v", i, e.Key, e.Value, e.Version, w.Key, w.Value, w.Version)
			}
			i++
		}
		if i != n {
			t.Fatalf("read %d entries, want %d", i, n)
		}
		_ = s.Close()

		list, err := List(fs, "db/snapshots")
		if err != nil || len(list) != 1 || list[0].Err != nil || list[0].StateHash != info.StateHash || list[0].Verified {
			t.Fatalf("List = %+v, %v", list, err)
		}
	}
}

func TestStateHashDependsOnStateOnly(t *testing.T) {
	fs := vfs.NewMem()
	fr, entries := testState(50)
	a := mustCreate(t, fs, "s", Meta{Frontier: fr, Created: testCreated}, entries)
	other := slices.Clone(entries)
	for i := range other {
		other[i].Version.Counter += 1000
		other[i].Version.Hash = hashOf("other")
	}
	b := mustCreate(t, fs, "s", Meta{Frontier: fr, PolicyRef: testRef, Created: testCreated.Add(time.Hour)}, other)
	if a.StateHash != b.StateHash || a.FileHash == b.FileHash {
		t.Fatalf("state hashes %s %s (want equal), file hashes %s %s (want different)", a.StateHash, b.StateHash, a.FileHash, b.FileHash)
	}
	other[3].Value = []byte("changed")
	c := mustCreate(t, fs, "s", Meta{Frontier: fr, Created: testCreated}, other)
	if c.StateHash == a.StateHash {
		t.Fatal("a changed value kept the state hash")
	}
	// Length prefixes: moving a byte from key to value changes the hash.
	h1, h2 := NewStateHasher(), NewStateHasher()
	_ = h1.Add([]byte("ab"), []byte("c"))
	_ = h2.Add([]byte("a"), []byte("bc"))
	if h1.Sum() == h2.Sum() {
		t.Fatal("state hash is not injective")
	}
	var empty segment.Hash
	blake3.DeriveKey(ContextState, nil, empty[:])
	if NewStateHasher().Sum() != empty {
		t.Fatal("empty state hash")
	}
	for _, bad := range [][2]string{{"b", "a"}, {"b", "b"}, {"b", ""}} {
		h := NewStateHasher()
		_ = h.Add([]byte(bad[0]), nil)
		testutil.WantCode(t, h.Add([]byte(bad[1]), nil), errs.CodeInvalidInput)
		if h.Count() != 1 {
			t.Fatal("a refused pair was counted")
		}
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	fr, entries := testState(10)
	boom := errs.New(errs.CodeIndexMismatch, "index broke")
	cases := []struct {
		name    string
		meta    Meta
		entries func() []Entry
		seqErr  error
		code    errs.Code
	}{
		{"unsorted keys", Meta{Frontier: fr}, func() []Entry { e := slices.Clone(entries); e[3], e[4] = e[4], e[3]; return e }, nil, errs.CodeInvalidInput},
		{"repeated key", Meta{Frontier: fr}, func() []Entry { e := slices.Clone(entries); e[4].Key = e[3].Key; return e }, nil, errs.CodeInvalidInput},
		{"empty key", Meta{Frontier: fr}, func() []Entry { e := slices.Clone(entries); e[0].Key = nil; return e }, nil, errs.CodeInvalidInput},
		{"version anchor outside frontier", Meta{Frontier: fr}, func() []Entry { e := slices.Clone(entries); e[5].Version.Anchor = "zz"; return e }, nil, errs.CodeInvalidInput},
		{"version seq beyond frontier", Meta{Frontier: fr}, func() []Entry { e := slices.Clone(entries); e[2].Version.Seq = 99; return e }, nil, errs.CodeInvalidInput},
		{"version seq 0", Meta{Frontier: fr}, func() []Entry { e := slices.Clone(entries); e[2].Version.Seq = 0; return e }, nil, errs.CodeInvalidInput},
		{"frontier seq 0", Meta{Frontier: Frontier{"a": {}}}, func() []Entry { return nil }, nil, errs.CodeInvalidInput},
		{"frontier bad anchor", Meta{Frontier: Frontier{"a\x00": {Seq: 1}}}, func() []Entry { return nil }, nil, errs.CodeInvalidInput},
		{"bad policy ref", Meta{Frontier: fr, PolicyRef: "sha256:00"}, func() []Entry { return nil }, nil, errs.CodeInvalidInput},
		{"entries error keeps its code", Meta{Frontier: fr}, func() []Entry { return entries }, boom, errs.CodeIndexMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			seq := seqOf(c.entries())
			if c.seqErr != nil {
				seq = func(yield func(Entry, error) bool) {
					for _, e := range c.entries()[:3] {
						if !yield(e, nil) {
							return
						}
					}
					yield(Entry{}, c.seqErr)
				}
			}
			_, err := Create(fs, "snaps", c.meta, seq)
			testutil.WantCode(t, err, c.code)
			names, _ := fs.List("snaps")
			if len(names) != 0 {
				t.Fatalf("failed Create left %v", names)
			}
		})
	}
}

func TestListAndCleanTemp(t *testing.T) {
	fs := vfs.NewMem()
	fr, entries := testState(3)
	var infos []Info
	for _, d := range []time.Duration{2 * time.Hour, 0, time.Hour} {
		infos = append(infos, mustCreate(t, fs, "s", Meta{Frontier: fr, Created: testCreated.Add(d)}, entries))
	}
	writeFile(t, fs, "s/snapshot-00000000000000000001-0000000000000000.snap", []byte("garbage"))
	writeFile(t, fs, "s/snapshot-00000000000000000009-0123456789abcdef.snap.tmp", []byte("half"))
	writeFile(t, fs, "s/README", []byte("not a snapshot"))
	list, err := List(fs, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 {
		t.Fatalf("List returned %d infos", len(list))
	}
	testutil.WantCode(t, list[0].Err, errs.CodeSnapshotCorrupted)
	if list[0].Created.UnixNano() != 1 {
		t.Fatalf("unreadable snapshot dated %v", list[0].Created)
	}
	for i, want := range []Info{infos[1], infos[2], infos[0]} {
		if got := list[i+1]; got.Err != nil || got.Name != want.Name {
			t.Fatalf("list[%d] = %s (%v), want %s", i+1, got.Name, got.Err, want.Name)
		}
	}
	j, err := json.Marshal(list[0])
	if err != nil || !strings.Contains(string(j), `"error":{"code":"INT_003","reason":"snapshot_corrupted"`) {
		t.Fatalf("Info JSON %s %v", j, err)
	}
	removed, err := CleanTemp(fs, "s")
	if err != nil || len(removed) != 1 || !strings.HasSuffix(removed[0], ".snap.tmp") {
		t.Fatalf("CleanTemp = %v, %v", removed, err)
	}
	if err := Delete(fs, infos[0].Path); err != nil {
		t.Fatal(err)
	}
	if list, _ := List(fs, "s"); len(list) != 3 {
		t.Fatalf("after Delete: %d snapshots", len(list))
	}
	if list, err := List(fs, "missing"); err != nil || len(list) != 0 {
		t.Fatalf("List(missing) = %v, %v", list, err)
	}
	_, err = Verify(fs, "s/nope.snap")
	testutil.WantCode(t, err, errs.CodeInvalidInput)
}

// smallSnapshot returns the bytes of a small valid snapshot.
func smallSnapshot(t *testing.T) []byte {
	fs := vfs.NewMem()
	fr, entries := testState(4)
	info := mustCreate(t, fs, "s", Meta{Frontier: fr, PolicyRef: testRef, Created: testCreated}, entries)
	return readFile(t, fs, info.Path)
}

// TestEveryByteFlipDetected flips every byte of a small snapshot, one at a
// time, two ways, and checks Verify reports INT_003 naming the file.
func TestEveryByteFlipDetected(t *testing.T) {
	data := smallSnapshot(t)
	t.Logf("snapshot of %d bytes", len(data))
	fs := vfs.NewMem()
	const path = "flip.snap"
	for i := range data {
		for _, mask := range []byte{0x01, 0xff} {
			bad := slices.Clone(data)
			bad[i] ^= mask
			writeFile(t, fs, path, bad)
			_, err := Verify(fs, path)
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != errs.CodeSnapshotCorrupted || e.File != path {
				t.Fatalf("byte %d ^ %#x: Verify = %v, want INT_003 in %s", i, mask, err, path)
			}
		}
	}
}

func TestEveryTruncationDetected(t *testing.T) {
	data := smallSnapshot(t)
	fs := vfs.NewMem()
	const path = "cut.snap"
	for n := 0; n < len(data); n++ {
		writeFile(t, fs, path, data[:n])
		_, err := Verify(fs, path)
		if e := testutil.WantCode(t, err, errs.CodeSnapshotCorrupted); e.File != path {
			t.Fatalf("truncated to %d: error names %q", n, e.File)
		}
		if _, err := ReadInfo(fs, path); errs.CodeOf(err) != errs.CodeSnapshotCorrupted {
			t.Fatalf("truncated to %d: ReadInfo = %v", n, err)
		}
	}
	writeFile(t, fs, path, append(slices.Clone(data), 0))
	_, err := Verify(fs, path)
	testutil.WantCode(t, err, errs.CodeSnapshotCorrupted)
}

// forge builds a snapshot file from parts with every checksum correct, so
// only the structural checks can catch what is wrong inside.
type forge struct {
	anchors []string
	heads   []Head
	raw     []byte
	entries uint64
	rawSize int64 // -1: len(raw)
	state   *segment.Hash
}

func (f forge) bytes() []byte {
	b := append([]byte(nil), Magic[:]...)
	b = append(b, FormatVersion, compressionZstd, 0, 0, 0, 0)
	b = be.AppendUint64(b, uint64(testCreated.UnixNano()))
	b = append(b, make([]byte, hashSize)...)
	b = be.AppendUint32(b, uint32(len(f.anchors)))
	for i, a := range f.anchors {
		b = append(b, byte(len(a)))
		b = append(b, a...)
		b = be.AppendUint64(b, f.heads[i].Seq)
		b = append(b, f.heads[i].Hash[:]...)
	}
	be.PutUint32(b[10:], uint32(len(b)+hashSize))
	var hs segment.Hash
	blake3.DeriveKey(ContextHeader, b, hs[:])
	b = append(b, hs[:]...)
	enc, _ := zstd.NewWriter(nil)
	body := enc.EncodeAll(f.raw, nil)
	b = append(b, body...)
	ft := footer{bodyLen: uint64(len(body)), entries: f.entries, rawSize: uint64(len(f.raw))}
	if f.rawSize >= 0 {
		ft.rawSize = uint64(f.rawSize)
	}
	if f.state != nil {
		ft.stateHash = *f.state
	} else {
		sh := NewStateHasher()
		ft.stateHash = sh.Sum()
	}
	b = appendFooterChecked(b, ft, hs)
	var fh segment.Hash
	blake3.DeriveKey(ContextFile, b, fh[:])
	return append(b, fh[:]...)
}

func rawEntry(key, value string, idx uint32, seq uint64) []byte {
	b := be.AppendUint32(nil, uint32(len(key)))
	b = append(b, key...)
	b = be.AppendUint32(b, uint32(len(value)))
	b = append(b, value...)
	b = be.AppendUint32(b, idx)
	b = be.AppendUint64(b, seq)
	b = be.AppendUint64(b, 1)
	b = be.AppendUint64(b, 1)
	return append(b, make([]byte, hashSize)...)
}

func stateOf(pairs ...string) *segment.Hash {
	sh := NewStateHasher()
	for i := 0; i < len(pairs); i += 2 {
		if err := sh.Add([]byte(pairs[i]), []byte(pairs[i+1])); err != nil {
			panic(err)
		}
	}
	h := sh.Sum()
	return &h
}

// TestForgedStructureDetected feeds files whose checksums all match but whose
// content breaks a rule: each must be INT_003.
func TestForgedStructureDetected(t *testing.T) {
	h := Head{Seq: 3, Hash: hashOf("h")}
	two := []string{"a", "b"}
	heads := []Head{h, h}
	good := forge{anchors: two, heads: heads, raw: append(rawEntry("k1", "v", 0, 1), rawEntry("k2", "w", 1, 3)...),
		entries: 2, rawSize: -1, state: stateOf("k1", "v", "k2", "w")}
	fs := vfs.NewMem()
	writeFile(t, fs, "good.snap", good.bytes())
	if _, err := Verify(fs, "good.snap"); err != nil {
		t.Fatalf("forged good snapshot: %v", err)
	}
	mut := func(f func(*forge)) forge { g := good; f(&g); return g }
	cases := map[string]forge{
		"frontier unsorted":       mut(func(g *forge) { g.anchors = []string{"b", "a"} }),
		"frontier repeated":       mut(func(g *forge) { g.anchors = []string{"a", "a"} }),
		"frontier seq 0":          mut(func(g *forge) { g.heads = []Head{h, {}} }),
		"frontier bad anchor id":  mut(func(g *forge) { g.anchors = []string{"a", "b\x7f"} }),
		"frontier empty anchor":   mut(func(g *forge) { g.anchors = []string{"", "b"} }),
		"keys unsorted":           mut(func(g *forge) { g.raw = append(rawEntry("k2", "w", 1, 3), rawEntry("k1", "v", 0, 1)...) }),
		"keys repeated":           mut(func(g *forge) { g.raw = append(rawEntry("k1", "v", 0, 1), rawEntry("k1", "w", 1, 3)...) }),
		"empty key":               mut(func(g *forge) { g.raw = append(rawEntry("", "v", 0, 1), rawEntry("k2", "w", 1, 3)...) }),
		"anchor index range":      mut(func(g *forge) { g.raw = append(rawEntry("k1", "v", 2, 1), rawEntry("k2", "w", 1, 3)...) }),
		"version beyond frontier": mut(func(g *forge) { g.raw = append(rawEntry("k1", "v", 0, 4), rawEntry("k2", "w", 1, 3)...) }),
		"version seq 0":           mut(func(g *forge) { g.raw = append(rawEntry("k1", "v", 0, 0), rawEntry("k2", "w", 1, 3)...) }),
		"wrong state hash":        mut(func(g *forge) { g.state = stateOf("k1", "v", "k2", "x") }),
		"count too low":           mut(func(g *forge) { g.entries = 1 }),
		"count too high":          mut(func(g *forge) { g.entries = 3 }),
		"raw size too high":       mut(func(g *forge) { g.rawSize = int64(len(g.raw)) + 70 }),
		"raw size too low":        mut(func(g *forge) { g.rawSize = int64(len(g.raw)) - 1 }),
		"trailing raw bytes":      mut(func(g *forge) { g.raw = append(slices.Clone(g.raw), 0) }),
		"entry cut short":         mut(func(g *forge) { g.raw = g.raw[:len(g.raw)-5]; g.rawSize = int64(len(good.raw)) }),
		"huge key length":         mut(func(g *forge) { g.raw = slices.Clone(g.raw); g.raw[0] = 0xff }),
	}
	for name, f := range cases {
		writeFile(t, fs, "bad.snap", f.bytes())
		_, err := Verify(fs, "bad.snap")
		if e := testutil.WantCode(t, err, errs.CodeSnapshotCorrupted); e.File != "bad.snap" {
			t.Errorf("%s: error names %q", name, e.File)
		}
	}
}
