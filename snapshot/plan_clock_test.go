package snapshot

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// timeOnly is a policy whose only trigger is every_seconds=60.
var timeOnly = policy(func(p *Policy) {
	p.Snapshot = Triggers{EverySeconds: 60}
	p.KeepSnapshots = 2
})

// TestPlanTimeTriggerAfterTheClockWentBack: after the wall clock went
// back, the newest snapshot can be dated after now. Its age taken as now
// minus its creation time would be negative, and every_seconds would not
// fire until the clock caught up with it: an hour, or ten years. A date
// after now says nothing about how long ago the snapshot was taken, so the
// trigger takes it as due, and the plan says why. The same holds for the oldest unsnapshotted record when there is no
// snapshot yet.
func TestPlanTimeTriggerAfterTheClockWentBack(t *testing.T) {
	ahead := snap("ahead", -10*365*24*time.Hour, map[string]uint64{"a": 10}) // dated ten years after now
	cases := []struct {
		name   string
		in     PlanInput
		create bool
		noted  string // a note naming this, when not ""
	}{
		{"snapshot dated after now", PlanInput{Policy: timeOnly, Now: planNow, Snapshots: []Info{ahead},
			Stats: Stats{RecordsSinceSnapshot: 5, BytesSinceSnapshot: 500}}, true, "ahead"},
		{"snapshot dated after now, nothing new", PlanInput{Policy: timeOnly, Now: planNow, Snapshots: []Info{ahead}},
			false, "ahead"},
		{"snapshot dated after now, every_seconds off", PlanInput{Policy: policy(func(p *Policy) { p.Snapshot = Triggers{EveryRecords: 100} }),
			Now: planNow, Snapshots: []Info{ahead}, Stats: Stats{RecordsSinceSnapshot: 5}}, false, ""},
		{"no snapshot, oldest record dated after now", PlanInput{Policy: timeOnly, Now: planNow,
			Stats: Stats{RecordsSinceSnapshot: 5, OldestUnsnapshotted: planNow.Add(time.Hour)}}, true, "oldest record"},
		{"snapshot a second ago", PlanInput{Policy: timeOnly, Now: planNow,
			Snapshots: []Info{snap("fresh", time.Second, map[string]uint64{"a": 10})}, Stats: Stats{RecordsSinceSnapshot: 5}}, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan, err := PlanCompaction(c.in)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(plan.Actions, func(a Action) bool { return a.Kind == ActionCreateSnapshot })
			if (i >= 0) != c.create {
				t.Fatalf("create_snapshot planned: %v, want %v\n%s", i >= 0, c.create, plan)
			}
			if c.create && (plan.Actions[i].Trigger != "every_seconds" || !strings.Contains(plan.Actions[i].Reason, "after now")) {
				t.Fatalf("create_snapshot %+v: want every_seconds, saying the date is after now", plan.Actions[i])
			}
			if c.noted != "" && !slices.ContainsFunc(plan.Notes, func(n string) bool {
				return strings.Contains(n, c.noted) && strings.Contains(n, "after now")
			}) {
				t.Fatalf("no note says %s is dated after now: %q", c.noted, plan.Notes)
			}
		})
	}
}
