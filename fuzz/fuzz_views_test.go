package fuzz

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Fuzz targets for snapshots, retention policies and the merge.

// snapshotEntries turns fuzz bytes into a valid, sorted state: each 3-byte
// chunk is a key byte, a value length and an anchor choice.
func snapshotEntries(b []byte) ([]snapshot.Entry, snapshot.Frontier) {
	anchors := []string{"a", "Z", "é", "dev-1"}
	byKey := map[string]snapshot.Entry{}
	seq := map[string]uint64{}
	for i := 0; i+2 < len(b); i += 3 {
		a := anchors[int(b[i+2])%len(anchors)]
		seq[a]++
		k := []byte{'k', b[i]}
		v := bytes.Repeat([]byte{b[i+1]}, int(b[i+1])%40)
		var h segment.Hash
		h[0], h[1] = b[i], byte(i)
		byKey[string(k)] = snapshot.Entry{Key: k, Value: v,
			Version: snapshot.Version{Anchor: a, Seq: seq[a], Counter: uint64(i + 1), Time: int64(i) * 1000, Hash: h}}
	}
	out := make([]snapshot.Entry, 0, len(byKey))
	for _, e := range byKey {
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y snapshot.Entry) int { return bytes.Compare(x.Key, y.Key) })
	fr := snapshot.Frontier{}
	for a, s := range seq {
		fr[a] = snapshot.Head{Seq: s}
	}
	return out, fr
}

func entrySeq(es []snapshot.Entry) iter.Seq2[snapshot.Entry, error] {
	return func(yield func(snapshot.Entry, error) bool) {
		for _, e := range es {
			if !yield(e, nil) {
				return
			}
		}
	}
}

func writeSnapshot(b []byte) (vfs.FS, snapshot.Info, []snapshot.Entry) {
	fs := vfs.NewMem()
	es, fr := snapshotEntries(b)
	info, err := snapshot.Create(fs, "snaps", snapshot.Meta{Frontier: fr, Created: time.Unix(1_800_000_000, 0)}, entrySeq(es))
	if err != nil {
		panic(err)
	}
	return fs, info, es
}

func readEntries(fs vfs.FS, path string) ([]snapshot.Entry, error) {
	s, err := snapshot.Open(fs, path)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var out []snapshot.Entry
	for e, err := range s.Entries() {
		if err != nil {
			return out, err
		}
		out = append(out, e.Clone())
	}
	return out, nil
}

func sameEntries(a, b []snapshot.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y snapshot.Entry) bool {
		return bytes.Equal(x.Key, y.Key) && bytes.Equal(x.Value, y.Value) && x.Version == y.Version
	})
}

// FuzzSnapshotRoundTrip: a state written as a snapshot reads back as the
// same entries and verifies.
func FuzzSnapshotRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("abcdefghijkl"))
	f.Add(bytes.Repeat([]byte{0xff, 39, 3}, 50))
	f.Fuzz(func(t *testing.T, b []byte) {
		fs, info, want := writeSnapshot(b)
		got, err := readEntries(fs, info.Path)
		if err != nil || !sameEntries(got, want) {
			t.Fatalf("read back %d entries (%v), wrote %d", len(got), err, len(want))
		}
		if v, err := snapshot.Verify(fs, info.Path); err != nil || v.StateHash != info.StateHash || v.Entries != uint64(len(want)) {
			t.Fatalf("verify: %+v %v", v, err)
		}
	})
}

// FuzzSnapshotFile: a genuine snapshot file with a change — a byte
// flipped, bytes cut off or appended. Never panic; Open, Verify and reading
// every entry either refuse with INT_003 (INPUT_001 for a missing file) or
// give exactly the entries written. No change yields other entries.
func FuzzSnapshotFile(f *testing.F) {
	f.Add([]byte("abcdefghijkl"), uint32(0), byte(0), uint16(0), []byte{})
	f.Add([]byte("abcdefghijkl"), uint32(70), byte(1), uint16(0), []byte{})
	f.Add(bytes.Repeat([]byte{7, 30, 1}, 40), uint32(200), byte(0x80), uint16(3), []byte("x"))
	f.Fuzz(func(t *testing.T, state []byte, at uint32, xor byte, cut uint16, tail []byte) {
		fs, info, want := writeSnapshot(state)
		data, err := testutil.ReadFile(fs, info.Path)
		if err != nil {
			t.Fatal(err)
		}
		data[int(at)%len(data)] ^= xor
		data = data[:len(data)-int(cut)%len(data)]
		data = append(data, tail...)
		path := fs.PathJoin("other", info.Name)
		testutil.WriteFile(fs, path, data)
		ok := func(err error) {
			if c := errs.CodeOf(err); err != nil && c != errs.CodeSnapshotCorrupted && c != errs.CodeInvalidInput {
				t.Fatalf("refused with %v (code %q)", err, c)
			}
		}
		_, verr := snapshot.Verify(fs, path)
		ok(verr)
		got, rerr := readEntries(fs, path)
		ok(rerr)
		if _, err := snapshot.ReadInfo(fs, path); err != nil {
			ok(err)
		}
		if verr == nil && (rerr != nil || !sameEntries(got, want)) {
			t.Fatalf("verified, but reads %d entries (%v) where %d were written", len(got), rerr, len(want))
		}
		if rerr == nil && !sameEntries(got, want) {
			t.Fatalf("a changed file read to completion as other entries")
		}
	})
}

// FuzzParsePolicy: any bytes as a retention policy. Never panic; refusals
// are INPUT_001; an accepted policy's canonical form parses to the same
// policy, is its own canonical form, and has a stable policy_ref.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(`{"version":"v1","snapshot":{"every_records":1000,"every_seconds":0,"every_bytes":0},"keep_snapshots":2,"raw_log":"keep","verify_before_delete":true}`))
	f.Add([]byte(`{"version":"v1","raw_log":"truncate"}`))
	f.Add([]byte(`{"version":"v1","snapshot":{"every_seconds":3600}}`))
	f.Add([]byte(`{"version":"v2"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := snapshot.ParsePolicy(b)
		if err != nil {
			if errs.CodeOf(err) != errs.CodeInvalidInput {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		c := p.Canonical()
		q, err := snapshot.ParsePolicy(c)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", c, err)
		}
		if !bytes.Equal(q.Canonical(), c) || q.PolicyRef() != p.PolicyRef() || fmt.Sprint(p) != fmt.Sprint(q) {
			t.Fatalf("policy does not round-trip: %s vs %s", c, q.Canonical())
		}
	})
}

// mergeStreams turns fuzz bytes into per-anchor logs with strictly
// increasing counters (ties across anchors allowed) and an arrival order.
func mergeStreams(b []byte) (map[string][]segment.Record, []segment.Record) {
	anchors := []string{"Z", "a", "é", "a\u0301", "b"}
	logs := map[string][]segment.Record{}
	last := map[string]uint64{}
	var all []segment.Record
	for i := 0; i+1 < len(b); i += 2 {
		a := anchors[int(b[i])%len(anchors)]
		c := last[a] + 1 + uint64(b[i+1]%4)
		last[a] = c
		r := segment.Record{Anchor: a, Seq: uint64(len(logs[a]) + 1), Counter: c, Type: segment.TypePut,
			Key: []byte{b[i+1]}, Value: []byte{byte(i)}}
		r.Hash = r.ComputeHash()
		logs[a] = append(logs[a], r)
		all = append(all, r)
	}
	slices.SortFunc(all, func(x, y segment.Record) int {
		return cmp.Or(cmp.Compare(x.Counter, y.Counter), cmp.Compare(x.Anchor, y.Anchor))
	})
	return logs, all
}

// FuzzMergeOrder: any set of anchor logs, fed to the merge in any order of
// sources, gives the reference order — sort by (counter, anchor id bytes)
// — numbered from 1, and the same merged-order root.
func FuzzMergeOrder(f *testing.F) {
	f.Add([]byte("abcdefgh"), uint8(0))
	f.Add(bytes.Repeat([]byte{1, 0, 2, 0, 3, 0}, 20), uint8(3))
	f.Add([]byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, rot uint8) {
		logs, want := mergeStreams(b)
		ids := make([]string, 0, len(logs))
		for a := range logs {
			ids = append(ids, a)
		}
		slices.Sort(ids)
		var roots []segment.Hash
		for _, order := range [][]string{ids, rotate(ids, int(rot)), reversed(ids)} {
			var srcs []merge.Source
			for _, a := range order {
				srcs = append(srcs, merge.SliceSource(logs[a]))
			}
			var got []segment.Record
			for p, err := range merge.Merge(context.Background(), srcs) {
				if err != nil {
					t.Fatal(err)
				}
				if p.Pos != uint64(len(got)+1) {
					t.Fatalf("position %d, want %d", p.Pos, len(got)+1)
				}
				got = append(got, p.Record)
			}
			if len(got) != len(want) {
				t.Fatalf("merged %d records, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i].Anchor != want[i].Anchor || got[i].Seq != want[i].Seq {
					t.Fatalf("position %d: %s#%d, want %s#%d", i+1, got[i].Anchor, got[i].Seq, want[i].Anchor, want[i].Seq)
				}
			}
			var srcs2 []merge.Source
			for _, a := range order {
				srcs2 = append(srcs2, merge.SliceSource(logs[a]))
			}
			root, n, err := merge.Root(merge.Merge(context.Background(), srcs2))
			if err != nil || n != uint64(len(want)) {
				t.Fatalf("root: %d records, %v", n, err)
			}
			roots = append(roots, root)
		}
		if roots[0] != roots[1] || roots[0] != roots[2] {
			t.Fatalf("the merged root depends on the order of the sources: %v", roots)
		}
	})
}

func rotate(s []string, k int) []string {
	if len(s) == 0 {
		return s
	}
	k %= len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}
