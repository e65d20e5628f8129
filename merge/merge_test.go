package merge

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"pgregory.net/rapid"
)

// anchorPool holds ids whose byte order differs from any locale's collation:
// upper case before lower, a combining sequence ("e" + U+0301) apart from its
// precomposed twin "é", and Latin-1 letters after all of ASCII.
var anchorPool = []string{"Z", "a", "é", "e\u0301", "ä", "A", "z", "b", "ß", "user@host", "../x", "Ünïcode", "a/b", "日本"}

// makeLog builds a hash-chained log for anchor starting at firstSeq with the
// given counters.
func makeLog(anchor string, firstSeq uint64, counters []uint64) []segment.Record {
	out := make([]segment.Record, len(counters))
	prev := segment.GenesisHash(anchor)
	for i, c := range counters {
		r := segment.Record{
			Anchor: anchor, Seq: firstSeq + uint64(i), Counter: c, Time: int64(c),
			Type: segment.TypePut, Key: []byte(fmt.Sprintf("k%d", c%7)), Value: []byte(fmt.Sprintf("%s#%d", anchor, c)),
			PrevHash: prev,
		}
		r.Hash = r.ComputeHash()
		prev = r.Hash
		out[i] = r
	}
	return out
}

func sources(logs [][]segment.Record) []Source {
	out := make([]Source, len(logs))
	for i, l := range logs {
		out[i] = SliceSource(l)
	}
	return out
}

// reference is the specification of the merged order: collect all, stable
// sort by (counter, anchor bytes).
func reference(logs [][]segment.Record) []segment.Record {
	var all []segment.Record
	for _, l := range logs {
		all = append(all, l...)
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].Counter != all[j].Counter {
			return all[i].Counter < all[j].Counter
		}
		return all[i].Anchor < all[j].Anchor
	})
	return all
}

// fataler is what collect needs of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func collect(t fataler, seq iter.Seq2[Positioned, error]) []Positioned {
	t.Helper()
	var out []Positioned
	for p, err := range seq {
		if err != nil {
			t.Fatalf("merge: %v", err)
		}
		out = append(out, p)
	}
	return out
}

func drawLogs(t *rapid.T) [][]segment.Record {
	anchors := rapid.SliceOfNDistinct(rapid.SampledFrom(anchorPool), 0, 8, rapid.ID[string]).Draw(t, "anchors")
	logs := make([][]segment.Record, len(anchors))
	for i, a := range anchors {
		n := rapid.IntRange(0, 25).Draw(t, "len")
		// Small counters and gaps make ties across anchors common.
		c := rapid.Uint64Range(1, 4).Draw(t, "start")
		counters := make([]uint64, n)
		for j := range counters {
			counters[j] = c
			c += rapid.Uint64Range(1, 3).Draw(t, "gap")
		}
		logs[i] = makeLog(a, rapid.Uint64Range(1, 3).Draw(t, "firstSeq"), counters)
	}
	return logs
}

func TestMergeMatchesReferenceInAnySourceOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		logs := drawLogs(t)
		want := reference(logs)
		perm := rapid.Permutation(logs).Draw(t, "order")
		got := collect(t, Merge(context.Background(), sources(perm)))
		if len(got) != len(want) {
			t.Fatalf("merged %d records, want %d", len(got), len(want))
		}
		for i, p := range got {
			if p.Pos != uint64(i+1) {
				t.Fatalf("record %d has position %d", i, p.Pos)
			}
			if p.Record.Hash != want[i].Hash {
				t.Fatalf("position %d: got %s/%d (counter %d), want %s/%d (counter %d)", p.Pos,
					p.Record.Anchor, p.Record.Seq, p.Record.Counter, want[i].Anchor, want[i].Seq, want[i].Counter)
			}
			if i > 0 && !Less(got[i-1].Record, p.Record) {
				t.Fatalf("position %d does not follow position %d", p.Pos, p.Pos-1)
			}
		}
	})
}

func TestMergeFromSkipsToPosition(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		logs := drawLogs(t)
		want := reference(logs)
		from := rapid.Uint64Range(0, uint64(len(want))+2).Draw(t, "from")
		got := collect(t, Merge(context.Background(), sources(logs), WithFrom(from)))
		skip := int(max(from, 1) - 1)
		if skip > len(want) {
			skip = len(want)
		}
		if len(got) != len(want)-skip {
			t.Fatalf("from %d: got %d records, want %d", from, len(got), len(want)-skip)
		}
		for i, p := range got {
			if p.Pos != uint64(skip+i+1) || p.Record.Hash != want[skip+i].Hash {
				t.Fatalf("from %d: index %d is position %d, want %d", from, i, p.Pos, skip+i+1)
			}
		}
	})
}

// TestMergeTiesByteOrder pins the tie-break on literal ids whose byte order is
// not their order under any locale collation or Unicode normalisation.
func TestMergeTiesByteOrder(t *testing.T) {
	ids := []string{"é", "ä", "e\u0301", "a", "Z"}
	var logs [][]segment.Record
	for _, a := range ids {
		logs = append(logs, makeLog(a, 1, []uint64{7, 9}))
	}
	got := collect(t, Merge(context.Background(), sources(logs)))
	var order []string
	for _, p := range got[:len(ids)] {
		order = append(order, p.Record.Anchor)
	}
	// Z 0x5a < a 0x61 < e+U+0301 0x65 0xcc 0x81 < ä 0xc3 0xa4 < é 0xc3 0xa9
	want := []string{"Z", "a", "e\u0301", "ä", "é"}
	if !slices.Equal(order, want) {
		t.Fatalf("counter-7 ties ordered %q, want %q", order, want)
	}
	for i, p := range got[len(ids):] {
		if p.Record.Anchor != want[i] || p.Record.Counter != 9 {
			t.Fatalf("counter-9 ties: position %d is %q/%d", p.Pos, p.Record.Anchor, p.Record.Counter)
		}
	}
}

func TestCompare(t *testing.T) {
	r := func(c uint64, a string) segment.Record { return segment.Record{Counter: c, Anchor: a} }
	cases := []struct {
		a, b segment.Record
		want int
	}{
		{r(1, "z"), r(2, "a"), -1},
		{r(2, "a"), r(1, "z"), 1},
		{r(5, "Z"), r(5, "a"), -1},
		{r(5, "é"), r(5, "e\u0301"), 1},
		{r(5, "a"), r(5, "a"), 0},
		{r(5, "a"), r(5, "ab"), -1},
	}
	for _, c := range cases {
		if got := Compare(c.a, c.b); got != c.want {
			t.Errorf("Compare((%d,%q), (%d,%q)) = %d, want %d", c.a.Counter, c.a.Anchor, c.b.Counter, c.b.Anchor, got, c.want)
		}
		if got := Less(c.a, c.b); got != (c.want < 0) {
			t.Errorf("Less((%d,%q), (%d,%q)) = %v", c.a.Counter, c.a.Anchor, c.b.Counter, c.b.Anchor, got)
		}
	}
}

func TestMergeRejectsBadStreams(t *testing.T) {
	good := func(a string) []segment.Record { return makeLog(a, 1, []uint64{1, 2, 3}) }
	gap := good("g")
	gap[2].Seq = 4
	repeat := good("r")
	repeat[2].Counter = 2
	down := good("d")
	down[1].Counter = 0
	down[2].Counter = 1
	seq0 := good("s")
	seq0[0].Seq = 0
	mixed := good("m")
	mixed[1].Anchor = "other"
	badID := good("x")
	for i := range badID {
		badID[i].Anchor = "bad\x00id"
	}
	cases := []struct {
		name   string
		logs   [][]segment.Record
		code   errs.Code
		anchor string
		seq    uint64
	}{
		{"seq gap", [][]segment.Record{good("a"), gap}, errs.CodeChainBroken, "g", 3},
		{"repeated counter", [][]segment.Record{repeat, good("b")}, errs.CodeChainBroken, "r", 3},
		{"decreasing counter", [][]segment.Record{down}, errs.CodeChainBroken, "d", 2},
		{"seq 0", [][]segment.Record{seq0}, errs.CodeChainBroken, "s", 0},
		{"source switches anchor", [][]segment.Record{mixed}, errs.CodeInvalidInput, "", 0},
		{"two sources of one anchor", [][]segment.Record{good("a"), good("b"), good("a")}, errs.CodeInvalidInput, "", 0},
		{"invalid anchor id", [][]segment.Record{badID}, errs.CodeInvalidInput, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got error
			n := 0
			for _, err := range Merge(context.Background(), sources(c.logs)) {
				if err != nil {
					if got != nil {
						t.Fatal("merge yielded after an error")
					}
					got = err
					continue
				}
				n++
			}
			var e *errs.Error
			if !errors.As(got, &e) || e.Code != c.code {
				t.Fatalf("got %v (after %d records), want code %s", got, n, c.code)
			}
			if e.Anchor != c.anchor || e.Seq != c.seq {
				t.Errorf("error located at %q/%d, want %q/%d: %v", e.Anchor, e.Seq, c.anchor, c.seq, e)
			}
		})
	}
}

func TestMergeSourceErrorAndCancel(t *testing.T) {
	boom := errs.New(errs.CodeHashMismatch, "boom")
	n := 0
	src := SourceFunc(func() (segment.Record, bool, error) {
		n++
		if n == 3 {
			return segment.Record{}, false, boom
		}
		return makeLog("e", uint64(n), []uint64{uint64(n)})[0], true, nil
	})
	var got error
	for _, err := range Merge(context.Background(), []Source{src}) {
		if err != nil {
			got = err
		}
	}
	if !errors.Is(got, boom) || errs.CodeOf(got) != errs.CodeHashMismatch {
		t.Fatalf("source error not passed on: %v", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range Merge(ctx, sources([][]segment.Record{makeLog("a", 1, []uint64{1})})) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled merge yielded %v", err)
		}
	}
}

func TestMergeWithBase(t *testing.T) {
	logs := [][]segment.Record{makeLog("a", 5, []uint64{10, 12}), makeLog("b", 3, []uint64{11})}
	got := collect(t, Merge(context.Background(), sources(logs), WithBase(100)))
	if len(got) != 3 || got[0].Pos != 101 || got[2].Pos != 103 || got[1].Record.Anchor != "b" {
		t.Fatalf("with base 100: %+v", got)
	}
}

func TestFromSeq(t *testing.T) {
	log := makeLog("a", 1, []uint64{1, 2, 3})
	src, stop := FromSeq(func(yield func(segment.Record, error) bool) {
		for _, r := range log {
			if !yield(r, nil) {
				return
			}
		}
	})
	defer stop()
	got := collect(t, Merge(context.Background(), []Source{src}))
	if len(got) != 3 || got[2].Record.Hash != log[2].Hash {
		t.Fatalf("FromSeq: %d records", len(got))
	}
}

// resettable is an allocation-free source that can be rewound.
type resettable struct {
	recs []segment.Record
	i    int
}

func (s *resettable) Next() (segment.Record, bool, error) {
	if s.i == len(s.recs) {
		return segment.Record{}, false, nil
	}
	s.i++
	return s.recs[s.i-1], true, nil
}

// TestMergeMemoryConstant checks that merging allocates the same whatever the
// length of the logs: the heap holds one head per source, nothing per record.
func TestMergeMemoryConstant(t *testing.T) {
	allocs := func(perSource int) float64 {
		const k = 16
		srcs := make([]*resettable, k)
		list := make([]Source, k)
		for i := range srcs {
			counters := make([]uint64, perSource)
			for j := range counters {
				counters[j] = uint64(j*k + i + 1)
			}
			srcs[i] = &resettable{recs: makeLog(fmt.Sprintf("anchor-%02d", i), 1, counters)}
			list[i] = srcs[i]
		}
		return testing.AllocsPerRun(5, func() {
			for _, s := range srcs {
				s.i = 0
			}
			n := 0
			for _, err := range Merge(context.Background(), list) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != k*perSource {
				t.Fatalf("merged %d", n)
			}
		})
	}
	small, large := allocs(10), allocs(5000)
	t.Logf("allocations per merge: %v for 160 records, %v for 80,000", small, large)
	if large > small || large > 16 {
		t.Fatalf("merge allocates with log length: %v allocations for 160 records, %v for 80,000", small, large)
	}
}

// TestMergeRejectsCorruptedLogs breaks one record of one random log — a seq
// gap or a counter that does not increase — and checks Merge yields INT_002
// located at that anchor, after yielding only records that sort correctly.
func TestMergeRejectsCorruptedLogs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		logs := drawLogs(t)
		var victims []int
		for i, l := range logs {
			if len(l) >= 2 {
				victims = append(victims, i)
			}
		}
		if len(victims) == 0 {
			t.Skip("no log long enough to break")
		}
		v := rapid.SampledFrom(victims).Draw(t, "victim")
		j := rapid.IntRange(1, len(logs[v])-1).Draw(t, "record")
		logs[v] = slices.Clone(logs[v])
		r := &logs[v][j]
		wantSeq := r.Seq
		switch rapid.IntRange(0, 2).Draw(t, "how") {
		case 0: // gap
			for k := j; k < len(logs[v]); k++ {
				logs[v][k].Seq++
			}
		case 1: // repeated counter
			r.Counter = logs[v][j-1].Counter
		case 2: // decreasing counter
			r.Counter = logs[v][j-1].Counter - min(logs[v][j-1].Counter, rapid.Uint64Range(1, 3).Draw(t, "back"))
		}
		var got error
		var prev *segment.Record
		for p, err := range Merge(context.Background(), sources(logs)) {
			if err != nil {
				got = err
				break
			}
			if prev != nil && !Less(*prev, p.Record) {
				t.Fatalf("position %d out of order before the error", p.Pos)
			}
			rec := p.Record
			prev = &rec
		}
		var e *errs.Error
		if !errors.As(got, &e) || e.Code != errs.CodeChainBroken || e.Anchor != logs[v][0].Anchor || e.Seq != wantSeq {
			t.Fatalf("got %v, want INT_002 at %q seq %d", got, logs[v][0].Anchor, wantSeq)
		}
	})
}

func TestMergeStopsEarly(t *testing.T) {
	calls := 0
	src := SourceFunc(func() (segment.Record, bool, error) {
		calls++
		return makeLog("a", uint64(calls), []uint64{uint64(calls)})[0], true, nil
	})
	for p := range Merge(context.Background(), []Source{src}) {
		if p.Pos == 3 {
			break
		}
	}
	if calls != 3 {
		t.Fatalf("source read %d times for 3 records", calls)
	}
}
