package snapshot

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/segment"
)

var planNow = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func headHash(anchor string, seq uint64) segment.Hash {
	return hashOf(fmt.Sprintf("%s/%d", anchor, seq))
}

// snap is a usable (verified) snapshot taken age ago at the frontier.
func snap(name string, age time.Duration, frontier map[string]uint64) Info {
	fr := Frontier{}
	for a, s := range frontier {
		fr[a] = Head{Seq: s, Hash: headHash(a, s)}
	}
	return Info{Name: name, Created: planNow.Add(-age), Frontier: fr, Size: 1000, FileHash: hashOf(name), Verified: true}
}

func seg(anchor string, segno, first, last uint64) SealedSegment {
	return SealedSegment{Anchor: anchor, Segno: segno, FirstSeq: first, LastSeq: last, Bytes: int64(10 * (last - first + 1)), LastHash: headHash(anchor, last)}
}

func policy(f func(*Policy)) Policy {
	p := DefaultPolicy()
	if f != nil {
		f(&p)
	}
	return p
}

// describeActions renders actions compactly for comparison.
func describeActions(p Plan) []string {
	var out []string
	for _, a := range p.Actions {
		switch a.Kind {
		case ActionCreateSnapshot:
			out = append(out, "create "+a.Trigger)
		case ActionDeleteSnapshot:
			out = append(out, "delete "+a.Snapshot)
		case ActionRecordCut:
			out = append(out, fmt.Sprintf("cut %s %d", a.Anchor, a.CutSeq))
		case ActionRemoveSegment:
			out = append(out, fmt.Sprintf("remove %s %d", a.Anchor, a.Segno))
		}
	}
	return out
}

func TestPlanCompaction(t *testing.T) {
	day := 24 * time.Hour
	five := []Info{
		snap("s1", 5*day, map[string]uint64{"a": 1}), snap("s2", 4*day, map[string]uint64{"a": 2}),
		snap("s3", 3*day, map[string]uint64{"a": 3}), snap("s4", 2*day, map[string]uint64{"a": 4}),
		snap("s5", time.Hour, map[string]uint64{"a": 5}),
	}
	corrupt := Info{Name: "s0", Created: planNow.Add(-9 * day), Err: errs.New(errs.CodeSnapshotCorrupted, "bad")}
	unverified := snap("s4u", 2*day, map[string]uint64{"a": 4})
	unverified.Verified = false
	truncSnaps := []Info{
		snap("A", 3*day, map[string]uint64{"a": 250, "b": 40}),
		snap("B", 2*day, map[string]uint64{"a": 400, "b": 90}),
		snap("C", time.Hour, map[string]uint64{"a": 500, "b": 120, "c": 9}),
	}
	truncSegs := []SealedSegment{
		seg("b", 2, 51, 100), seg("a", 1, 1, 100), seg("a", 3, 201, 300), seg("a", 2, 101, 200),
		seg("a", 4, 301, 400), seg("a", 5, 401, 500), seg("b", 1, 1, 50), seg("c", 1, 1, 10),
	}
	cases := []struct {
		name      string
		in        PlanInput
		want      []string
		keep      []string
		noteHas   string
		tableHas  string
		wantError errs.Code
	}{
		{name: "nothing to do", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five[4:], Stats: Stats{RecordsSinceSnapshot: 10, BytesSinceSnapshot: 100}},
			keep: []string{"s5"}, noteHas: "no snapshot trigger fired"},
		{name: "records trigger", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five[4:], Stats: Stats{RecordsSinceSnapshot: 1000}},
			want: []string{"create every_records"}, keep: []string{"s5"}},
		{name: "bytes trigger", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five[4:], Stats: Stats{RecordsSinceSnapshot: 3, BytesSinceSnapshot: 200 << 20}},
			want: []string{"create every_bytes"}, keep: []string{"s5"}},
		{name: "time trigger", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five[3:4], Stats: Stats{RecordsSinceSnapshot: 1}},
			want: []string{"create every_seconds"}, keep: []string{"s4"}},
		{name: "several triggers: the first names the action", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five[3:4], Stats: Stats{RecordsSinceSnapshot: 5000, BytesSinceSnapshot: 1 << 30}},
			want: []string{"create every_records"}, keep: []string{"s4"}, tableHas: "every_seconds=86400"},
		{name: "time trigger without a snapshot dates from the oldest record", in: PlanInput{Policy: DefaultPolicy(), Stats: Stats{RecordsSinceSnapshot: 5, OldestUnsnapshotted: planNow.Add(-2 * day)}},
			want: []string{"create every_seconds"}},
		{name: "no snapshot, unknown age, few records", in: PlanInput{Policy: DefaultPolicy(), Stats: Stats{RecordsSinceSnapshot: 5}},
			noteHas: "age unknown"},
		{name: "no new records: no snapshot however old", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five[:1]},
			keep: []string{"s1"}, noteHas: "no records since"},
		{name: "triggers off", in: PlanInput{Policy: policy(func(p *Policy) { p.Snapshot = Triggers{} }), Snapshots: five[:1], Stats: Stats{RecordsSinceSnapshot: 1 << 40, BytesSinceSnapshot: 1 << 50}},
			keep: []string{"s1"}},
		{name: "keep last 3", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five},
			want: []string{"delete s1", "delete s2"}, keep: []string{"s3", "s4", "s5"}},
		{name: "keep last 3, input unsorted", in: PlanInput{Policy: DefaultPolicy(), Snapshots: []Info{five[3], five[0], five[4], five[2], five[1]}},
			want: []string{"delete s1", "delete s2"}, keep: []string{"s3", "s4", "s5"}},
		{name: "a new snapshot takes a place", in: PlanInput{Policy: DefaultPolicy(), Snapshots: five, Stats: Stats{RecordsSinceSnapshot: 2000}},
			want: []string{"create every_records", "delete s1", "delete s2", "delete s3"}, keep: []string{"s4", "s5"}},
		{name: "keep 1: the newest is pinned until the new one exists", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 1 }), Snapshots: five[3:], Stats: Stats{RecordsSinceSnapshot: 2000}},
			want: []string{"create every_records", "delete s4"}, keep: []string{"s5"}, noteHas: "s5 is the newest and stays"},
		{name: "keep 1 without a trigger", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 1 }), Snapshots: five},
			want: []string{"delete s1", "delete s2", "delete s3", "delete s4"}, keep: []string{"s5"}},
		{name: "fewer than keep: nothing deleted", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 10 }), Snapshots: five, Stats: Stats{RecordsSinceSnapshot: 2000}},
			want: []string{"create every_records"}, keep: []string{"s1", "s2", "s3", "s4", "s5"}},
		{name: "corrupt and unverified snapshots are left alone", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 1 }),
			Snapshots: []Info{corrupt, five[2], unverified, five[0], five[4]}},
			want: []string{"delete s1", "delete s3"}, keep: []string{"s5"}, noteHas: "s4u is not verified"},
		{name: "without verify_before_delete an unverified snapshot counts", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 1; p.VerifyBeforeDelete = false }),
			Snapshots: []Info{five[2], unverified}},
			want: []string{"delete s3"}, keep: []string{"s4u"}},
		{name: "truncate below every kept snapshot", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 2; p.RawLog = RawLogTruncate }),
			Snapshots: truncSnaps, Segments: truncSegs},
			want: []string{"delete A", "cut a 400", "cut b 50", "remove a 1", "remove a 2", "remove a 3", "remove a 4", "remove b 1"},
			keep: []string{"B", "C"}, tableHas: `anchor "a" segment 4`},
		{name: "truncate with a create keeps the pinned newest as the bound", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 1; p.RawLog = RawLogTruncate }),
			Snapshots: truncSnaps[1:], Segments: truncSegs, Stats: Stats{RecordsSinceSnapshot: 1000}},
			want: []string{"create every_records", "delete B", "cut a 500", "cut b 100", "remove a 1", "remove a 2", "remove a 3", "remove a 4", "remove a 5", "remove b 1", "remove b 2"},
			keep: []string{"C"}},
		// CONTRACT §6: a cut is covered by a signed checkpoint. Here the newest
		// stored one holds 250 records of a (segments 1-2 of the 4 below
		// the snapshots) and none of b.
		{name: "truncate only what a checkpoint covers", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 2; p.RawLog = RawLogTruncate }),
			Snapshots: truncSnaps, Segments: truncSegs, Checkpointed: map[string]uint64{"a": 250, "c": 10}},
			want: []string{"delete A", "cut a 200", "remove a 1", "remove a 2"},
			keep: []string{"B", "C"}, noteHas: `anchor "b": 1 sealed segments below the oldest kept snapshot stay until a signed checkpoint covers them`},
		{name: "no checkpoint: nothing is truncated", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 2; p.RawLog = RawLogTruncate }),
			Snapshots: truncSnaps, Segments: truncSegs, Checkpointed: map[string]uint64{}},
			want: []string{"delete A"}, keep: []string{"B", "C"}, noteHas: `anchor "a": 4 sealed segments`},
		{name: "forever keeps every segment", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 2 }), Snapshots: truncSnaps, Segments: truncSegs},
			want: []string{"delete A"}, keep: []string{"B", "C"}, noteHas: `raw_log is "forever": 5 sealed segments (4500 bytes)`},
		{name: "truncate with no usable snapshot removes nothing", in: PlanInput{Policy: policy(func(p *Policy) { p.RawLog = RawLogTruncate }), Snapshots: []Info{corrupt}, Segments: truncSegs}},
		{name: "head hash disagreement", in: PlanInput{Policy: policy(func(p *Policy) { p.RawLog = RawLogTruncate }), Snapshots: []Info{snap("X", day, map[string]uint64{"a": 100})},
			Segments: []SealedSegment{{Anchor: "a", Segno: 1, FirstSeq: 1, LastSeq: 100, LastHash: hashOf("other")}}}, wantError: errs.CodeChainBroken},
		{name: "segment gap", in: PlanInput{Policy: DefaultPolicy(), Snapshots: []Info{snap("X", day, map[string]uint64{"a": 100})},
			Segments: []SealedSegment{seg("a", 1, 1, 10), seg("a", 2, 12, 20)}}, wantError: errs.CodeChainBroken},
		{name: "segment overlap", in: PlanInput{Policy: DefaultPolicy(), Snapshots: []Info{snap("X", day, map[string]uint64{"a": 100})},
			Segments: []SealedSegment{seg("a", 1, 1, 10), seg("a", 2, 10, 20)}}, wantError: errs.CodeChainBroken},
		{name: "bad policy", in: PlanInput{Policy: policy(func(p *Policy) { p.KeepSnapshots = 0 })}, wantError: errs.CodeInvalidInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Now = planNow
			plan, err := PlanCompaction(c.in)
			if c.wantError != "" {
				testutil.WantCode(t, err, c.wantError)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := describeActions(plan); !slices.Equal(got, c.want) {
				t.Fatalf("actions\n got %q\nwant %q\n%s", got, c.want, plan)
			}
			if !slices.Equal(plan.Keep, c.keep) && (len(plan.Keep) != 0 || len(c.keep) != 0) {
				t.Fatalf("keep %q, want %q", plan.Keep, c.keep)
			}
			if c.noteHas != "" && !strings.Contains(strings.Join(plan.Notes, "\n"), c.noteHas) {
				t.Fatalf("notes %q lack %q", plan.Notes, c.noteHas)
			}
			text := plan.String()
			if c.tableHas != "" && !strings.Contains(text, c.tableHas) {
				t.Fatalf("table lacks %q:\n%s", c.tableHas, text)
			}
			checkPlanInvariants(t, c.in, plan)
		})
	}
	_, err := PlanCompaction(PlanInput{Policy: DefaultPolicy()})
	testutil.WantCode(t, err, errs.CodeInvalidInput)
}

// checkPlanInvariants holds for every plan: create comes first, the newest
// usable snapshot is never deleted, cuts precede removals and are covered by
// every kept snapshot, and the JSON form round-trips.
func checkPlanInvariants(t *testing.T, in PlanInput, plan Plan) {
	t.Helper()
	var newest Info
	for _, s := range in.Snapshots {
		if s.Err == nil && (s.Verified || !in.Policy.VerifyBeforeDelete) && !s.Created.Before(newest.Created) {
			newest = s
		}
	}
	seenRemove := false
	for i, a := range plan.Actions {
		switch a.Kind {
		case ActionCreateSnapshot:
			if i != 0 {
				t.Fatal("create_snapshot is not the first action")
			}
		case ActionDeleteSnapshot:
			if newest.Name != "" && a.Snapshot == newest.Name {
				t.Fatalf("the newest snapshot %s is deleted", newest.Name)
			}
		case ActionRecordCut:
			if seenRemove {
				t.Fatal("a cut follows a removal")
			}
			for _, k := range plan.Keep {
				for _, s := range in.Snapshots {
					if s.Name == k && s.Frontier[a.Anchor].Seq < a.CutSeq {
						t.Fatalf("cut %s at %d is above kept snapshot %s", a.Anchor, a.CutSeq, k)
					}
				}
			}
		case ActionRemoveSegment:
			seenRemove = true
		}
	}
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil || len(back.Actions) != len(plan.Actions) {
		t.Fatalf("plan JSON %s: %v", b, err)
	}
	for i := range back.Actions {
		if back.Actions[i] != plan.Actions[i] {
			t.Fatalf("JSON round trip changed action %d: %+v → %+v", i, plan.Actions[i], back.Actions[i])
		}
	}
}

func TestPlanRendering(t *testing.T) {
	plan, err := PlanCompaction(PlanInput{
		Policy: policy(func(p *Policy) { p.KeepSnapshots = 1; p.RawLog = RawLogTruncate }), Now: planNow,
		Snapshots: []Info{snap("old.snap", 48*time.Hour, map[string]uint64{"a": 10}), snap("new.snap", time.Hour, map[string]uint64{"a": 20})},
		Segments:  []SealedSegment{seg("a", 1, 1, 10), seg("a", 2, 11, 20), seg("a", 3, 21, 30)},
		Stats:     Stats{RecordsSinceSnapshot: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	text := plan.String()
	t.Logf("\n%s", text)
	for _, want := range []string{"#  ACTION", "create_snapshot", "delete_snapshot  old.snap", "record_cut", "cut at seq 20",
		`anchor "a" segment 2`, "seqs 11..20, 100 bytes", headHash("a", 20).String(), "keep: new.snap", "note:"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	b, _ := json.Marshal(plan)
	for _, want := range []string{`"policy_ref":"blake3:`, `"action":"create_snapshot","trigger":"every_records"`, `"action":"record_cut","anchor":"a","cut_seq":20,"hash":"blake3:`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `"hash":"blake3:0000000000000000`) {
		t.Errorf("JSON prints a zero hash:\n%s", b)
	}
	empty, _ := PlanCompaction(PlanInput{Policy: DefaultPolicy(), Now: planNow})
	if !strings.Contains(empty.String(), "nothing to do") {
		t.Errorf("empty plan renders as %q", empty.String())
	}
}

// TestPlanKeepsTheNewestFrontierWhenTheClockWentBack: the planner ordered
// snapshots by creation time, so after the clock went back it kept the
// snapshot of the older frontier and deleted the newest state. It orders
// them by the records their frontiers cover now.
func TestPlanKeepsTheNewestFrontierWhenTheClockWentBack(t *testing.T) {
	older := snap("older", time.Hour, map[string]uint64{"a": 10, "b": 5})
	newer := snap("newer", 2*time.Hour, map[string]uint64{"a": 20, "b": 5}) // the clock went back
	p := policy(func(p *Policy) { p.KeepSnapshots = 1; p.RawLog = RawLogTruncate })
	plan, err := PlanCompaction(PlanInput{Policy: p, Now: planNow, Snapshots: []Info{newer, older},
		Segments: []SealedSegment{seg("a", 1, 1, 10), seg("a", 2, 11, 20)}})
	if err != nil {
		t.Fatal(err)
	}
	got := describeActions(plan)
	if want := []string{"delete older", "cut a 20", "remove a 1", "remove a 2"}; !slices.Equal(got, want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	if !slices.Equal(plan.Keep, []string{"newer"}) {
		t.Fatalf("keep %v, want [newer]", plan.Keep)
	}
	// List's order is the planner's: a file it cannot read first.
	bad := Info{Name: "bad", Created: planNow, Err: errs.New(errs.CodeSnapshotCorrupted, "unreadable")}
	list := []Info{newer, bad, older}
	slices.SortFunc(list, Compare)
	if list[0].Name != "bad" || list[1].Name != "older" || list[2].Name != "newer" {
		t.Fatalf("Compare orders %s, %s, %s", list[0].Name, list[1].Name, list[2].Name)
	}
}

// A plan under raw_log "truncate" that removes nothing says what holds back
// each kind of action: no segment sealed yet (with the segment size), no
// snapshot yet (this run creates one, or none fires), no sealed segment
// below the oldest kept snapshot; and a plan that deletes no snapshot says
// how many are kept within keep_snapshots. It said "nothing to do" alone.
func TestPlanSaysWhatHoldsEachActionBack(t *testing.T) {
	trunc := policy(func(p *Policy) { p.RawLog = RawLogTruncate; p.KeepSnapshots = 2 })
	s1 := snap("s1", time.Hour, map[string]uint64{"a": 50})
	cases := []struct {
		name string
		in   PlanInput
		want []string
	}{
		{"nothing sealed", PlanInput{Policy: trunc, Snapshots: []Info{s1}, SegmentSize: 64 << 20, Checkpointed: map[string]uint64{"a": 50}},
			[]string{"no segment is sealed", "67108864 bytes", "--segment-size", "delete_snapshot: none, 1 snapshot kept within keep_snapshots=2"}},
		{"no snapshot yet, one to be created", PlanInput{Policy: trunc, Stats: Stats{RecordsSinceSnapshot: 5000}, Segments: []SealedSegment{seg("a", 1, 1, 40)}},
			[]string{"no snapshot yet", "this run creates one"}},
		{"no snapshot, none due", PlanInput{Policy: trunc, Stats: Stats{RecordsSinceSnapshot: 5}, Segments: []SealedSegment{seg("a", 1, 1, 40)}},
			[]string{"no snapshot to remove segments below"}},
		{"sealed, but not below the snapshot", PlanInput{Policy: trunc, Snapshots: []Info{s1}, Segments: []SealedSegment{seg("a", 1, 1, 60)}, Checkpointed: map[string]uint64{"a": 60}},
			[]string{"no sealed segment lies wholly below the oldest kept snapshot, s1"}},
		{"below, but no checkpoint covers it", PlanInput{Policy: trunc, Snapshots: []Info{s1}, Segments: []SealedSegment{seg("a", 1, 1, 40)}, Checkpointed: map[string]uint64{}},
			[]string{"until a signed checkpoint covers them"}},
	}
	for _, c := range cases {
		c.in.Now = planNow
		p, err := PlanCompaction(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(p.Actions) > 0 && p.Actions[0].Kind != ActionCreateSnapshot {
			t.Fatalf("%s: the plan does something: %v", c.name, describeActions(p))
		}
		text := p.String()
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the plan does not say %q:\n%s", c.name, w, text)
			}
		}
		if strings.Contains(text, "no sealed segment lies wholly below") && c.name == "below, but no checkpoint covers it" {
			t.Errorf("%s: a segment below the snapshot said not to be below it:\n%s", c.name, text)
		}
	}
}
