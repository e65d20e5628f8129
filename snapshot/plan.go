package snapshot

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
)

// SealedSegment describes one sealed (immutable) segment of an anchor, as the
// planner needs it. LastHash is the hash of record LastSeq — the seal's last
// hash — which becomes the head hash at a cut made after this segment.
type SealedSegment struct {
	Anchor   string
	Segno    uint64
	FirstSeq uint64
	LastSeq  uint64
	Bytes    int64
	LastHash segment.Hash
}

// Stats are the database's figures the snapshot triggers compare against.
type Stats struct {
	// RecordsSinceSnapshot and BytesSinceSnapshot count the records (and
	// their frame bytes) not covered by the newest snapshot.
	RecordsSinceSnapshot uint64
	BytesSinceSnapshot   uint64
	// OldestUnsnapshotted is the time of the oldest record not covered by any
	// snapshot. It dates the time trigger only when there is no snapshot yet;
	// zero means unknown.
	OldestUnsnapshotted time.Time
}

// PlanInput is everything the planner looks at. It reads nothing else.
type PlanInput struct {
	Policy Policy
	Now    time.Time
	// Snapshots are the existing snapshots, in any order, as List returns
	// them, with Verified set on those the caller verified.
	Snapshots []Info
	Stats     Stats
	// Segments are the sealed segments of every anchor (never the active one).
	Segments []SealedSegment
	// Checkpointed is, per anchor, the tree size of the newest checkpoint
	// the database itself stored (the engine counts only one its audit log
	// records: it holds no key to check a signature, and anyone can write a
	// note whose roots are the log's). A cut must be covered by it (CONTRACT §6:
	// the cut's head is then in a signed tree, so the chain from the cut on
	// can be checked against a root nobody can rewrite): segments above it
	// stay. Nil means the caller sets no such bound (tests of the planner
	// alone); the engine always passes one, empty when it holds no
	// checkpoint.
	Checkpointed map[string]uint64
	// SegmentSize is the size at which the database seals an anchor's
	// active segment, for the note that says why nothing is sealed yet; 0
	// when unknown.
	SegmentSize int64
}

// ActionKind names a step of a plan.
type ActionKind string

// The kinds of action, in the order a plan lists them.
const (
	// ActionCreateSnapshot: take a snapshot at the current frontier.
	ActionCreateSnapshot ActionKind = "create_snapshot"
	// ActionDeleteSnapshot: delete an older snapshot beyond keep_snapshots.
	ActionDeleteSnapshot ActionKind = "delete_snapshot"
	// ActionRecordCut: durably record, in the audit log (and the stubs the
	// removals leave), that the anchor's log now starts after CutSeq, whose
	// hash is Hash. A cut lies inside the newest checkpoint the database
	// stored (PlanInput.Checkpointed); none is made here (the engine holds no
	// signing key).
	ActionRecordCut ActionKind = "record_cut"
	// ActionRemoveSegment: remove a sealed segment wholly below the cut.
	ActionRemoveSegment ActionKind = "remove_segment"
)

// Action is one step of a plan. Which fields are set depends on Kind:
//
//	create_snapshot  Trigger, Reason
//	delete_snapshot  Snapshot (file name), Bytes, Hash (its file hash), Reason
//	record_cut       Anchor, CutSeq, Hash (head hash at the cut), Reason
//	remove_segment   Anchor, Segno, FirstSeq, LastSeq, Bytes, Hash (hash of
//	                 its last record), Reason
type Action struct {
	Kind     ActionKind   `json:"action"`
	Trigger  string       `json:"trigger,omitempty"` // every_records, every_bytes or every_seconds
	Snapshot string       `json:"snapshot,omitempty"`
	Anchor   string       `json:"anchor,omitempty"`
	Segno    uint64       `json:"segno,omitempty"`
	FirstSeq uint64       `json:"first_seq,omitempty"`
	LastSeq  uint64       `json:"last_seq,omitempty"`
	CutSeq   uint64       `json:"cut_seq,omitempty"`
	Bytes    int64        `json:"bytes,omitempty"`
	Hash     segment.Hash `json:"hash,omitzero"`
	Reason   string       `json:"reason"`
}

// Plan is the outcome of planning: what to do, in order, and why.
type Plan struct {
	PolicyRef string    `json:"policy_ref"`
	Now       time.Time `json:"now"`
	Actions   []Action  `json:"actions"`
	// Keep names the existing snapshots the plan keeps, oldest first.
	Keep []string `json:"keep"`
	// Notes explain what the plan leaves alone and why.
	Notes []string `json:"notes"`
}

// PlanCompaction decides, without touching anything, what a compaction under
// the policy does now. The plan's actions come in an order that lets the
// caller delete nothing before its replacement is durable and verified:
//
//  1. create_snapshot, if a trigger fired (records, bytes or time since the
//     newest snapshot, with at least one record not yet covered). The time
//     is due, too, when the newest snapshot (or, with none, the oldest
//     record not in one) is dated after now: after the clock went back its
//     age is unknown, and a negative age would hold the trigger off until
//     the clock caught up. A note names the date;
//  2. delete_snapshot for usable snapshots beyond keep_snapshots, oldest
//     first (Compare: by the records their frontiers cover, not by the
//     creation time a clock that went back gets wrong). A planned new snapshot counts toward keep_snapshots, but the
//     newest existing usable snapshot is never deleted in the same plan: it
//     stays until the new one is there to replace it;
//  3. with raw_log "truncate", record_cut per anchor, then remove_segment for
//     each sealed segment whose records all lie at or below every kept
//     snapshot's frontier seq for that anchor (that is, below the oldest kept
//     snapshot's frontier), lowest segment first.
//
// A snapshot is usable when it was read without error and — when the
// policy says verify_before_delete — verified. The caller sets Err on every
// snapshot that must not steer the plan: one not of its log, and (the
// engine) one its audit log does not record with the hashes the file has,
// since a snapshot's hashes are unkeyed and anyone can write a well-formed
// one. Snapshots that are not usable are
// neither counted nor deleted; a note names them. Inconsistent segments (a
// gap or overlap between an anchor's sealed segments) are INT_002, a kept
// snapshot whose head hash disagrees with the segment sealing the same seq
// is INT_002, and a bad policy or a zero Now is INPUT_001.
func PlanCompaction(in PlanInput) (Plan, error) {
	p := in.Policy
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	if in.Now.IsZero() {
		return Plan{}, errs.New(errs.CodeInvalidInput, "compaction plan: now is zero")
	}
	plan := Plan{PolicyRef: p.PolicyRef(), Now: in.Now.UTC(), Actions: []Action{}, Keep: []string{}, Notes: []string{}}
	note := func(format string, args ...any) { plan.Notes = append(plan.Notes, fmt.Sprintf(format, args...)) }

	snaps := slices.Clone(in.Snapshots)
	// Oldest first by frontier, not by creation time: after the clock went
	// back that would keep an older state and delete the newest.
	slices.SortFunc(snaps, Compare)
	var usable []Info
	for _, s := range snaps {
		switch {
		case s.Err != nil:
			note("snapshot %s cannot be used and is left alone: %v", s.Name, s.Err)
		case p.VerifyBeforeDelete && !s.Verified:
			note("snapshot %s is not verified; verify_before_delete leaves it out of the plan", s.Name)
		default:
			usable = append(usable, s)
		}
	}

	// 1. Triggers.
	create := triggers(p, in, usable, &plan)

	// 2. Keep the newest; delete the rest.
	keepExisting := int(min(p.KeepSnapshots, int64(len(usable))))
	if create && keepExisting == int(p.KeepSnapshots) {
		keepExisting-- // the new snapshot takes one place
	}
	if keepExisting < 1 && len(usable) > 0 {
		keepExisting = 1
		note("snapshot %s is the newest and stays until the new snapshot replaces it (a later run deletes it)", usable[len(usable)-1].Name)
	}
	kept := usable[len(usable)-keepExisting:]
	if keepExisting == len(usable) && len(usable) > 0 {
		note("delete_snapshot: none, %s kept within keep_snapshots=%d%s", plural(len(usable), "snapshot"), p.KeepSnapshots, createText(create))
	}
	for _, s := range usable[:len(usable)-keepExisting] {
		plan.Actions = append(plan.Actions, Action{
			Kind: ActionDeleteSnapshot, Snapshot: s.Name, Bytes: s.Size, Hash: s.FileHash,
			Reason: fmt.Sprintf("beyond keep_snapshots=%d: %d newer kept%s", p.KeepSnapshots, keepExisting, createText(create)),
		})
	}
	for _, s := range kept {
		plan.Keep = append(plan.Keep, s.Name)
	}

	// 3. Truncation.
	cuts, err := planCuts(in.Segments, kept, in.Checkpointed, note)
	if err != nil {
		return Plan{}, err
	}
	switch {
	case len(cuts) == 0:
		if p.RawLog == RawLogTruncate {
			whyNoCut(in, kept, create, note)
		}
	case p.RawLog == RawLogTruncate:
		for _, c := range cuts {
			plan.Actions = append(plan.Actions, Action{
				Kind: ActionRecordCut, Anchor: c.anchor, CutSeq: c.seq, Hash: c.hash,
				Reason: fmt.Sprintf("log starts after seq %d, covered by every kept snapshot%s", c.seq, c.signed),
			})
		}
		for _, c := range cuts {
			for _, s := range c.segments {
				plan.Actions = append(plan.Actions, Action{
					Kind: ActionRemoveSegment, Anchor: s.Anchor, Segno: s.Segno, FirstSeq: s.FirstSeq, LastSeq: s.LastSeq,
					Bytes: s.Bytes, Hash: s.LastHash, Reason: fmt.Sprintf("wholly below the cut at seq %d", c.seq),
				})
			}
		}
	default:
		var n int
		var bytes int64
		for _, c := range cuts {
			for _, s := range c.segments {
				n++
				bytes += s.Bytes
			}
		}
		note("raw_log is %q: %d sealed segments (%d bytes) below the oldest kept snapshot stay", p.RawLog, n, bytes)
	}
	return plan, nil
}

// whyNoCut notes what holds back every truncation of a plan under raw_log
// "truncate" that removes nothing: no sealed segment (the records are all in
// the segments being written, which seal at the segment size), no snapshot
// to cut below, or no sealed segment wholly below the oldest kept one.
// (Segments a checkpoint does not cover yet have their own note.)
func whyNoCut(in PlanInput, kept []Info, create bool, note func(string, ...any)) {
	switch {
	case len(in.Segments) == 0:
		size := "the segment size"
		if in.SegmentSize > 0 {
			size = fmt.Sprintf("the segment size, %d bytes", in.SegmentSize)
		}
		note("truncation: no segment is sealed, and only a sealed segment is removed: every anchor's records are in the segment being written, which is sealed when it reaches %s (set with --segment-size on the commands that append, Options.SegmentSize in Go)", size)
	case len(kept) == 0 && create:
		note("truncation: no snapshot yet to remove segments below; this run creates one, and a later run removes the sealed segments wholly below it")
	case len(kept) == 0:
		note("truncation: no snapshot to remove segments below (a trigger must fire, or snapshot create)")
	default:
		below := false // a segment the checkpoint holds back, which its note names
		for _, s := range in.Segments {
			limit := kept[0].Frontier[s.Anchor].Seq
			for _, k := range kept[1:] {
				limit = min(limit, k.Frontier[s.Anchor].Seq)
			}
			below = below || s.LastSeq <= limit
		}
		if !below {
			note("truncation: no sealed segment lies wholly below the oldest kept snapshot, %s", kept[0].Name)
		}
	}
}

// plural is "1 noun" or "n nouns".
func plural[N ~int | ~int64 | ~uint64 | ~uint32](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func createText(create bool) string {
	if create {
		return " and one to be created"
	}
	return ""
}

// triggers appends a create_snapshot action when one fires and reports it.
func triggers(p Policy, in PlanInput, usable []Info, plan *Plan) bool {
	st := in.Stats
	// What the time trigger measures from: the newest snapshot's creation
	// time, or, with none, the oldest record's time.
	var from time.Time
	var what string
	ageKnown := len(usable) > 0 || !st.OldestUnsnapshotted.IsZero()
	if len(usable) > 0 {
		newest := usable[len(usable)-1]
		from, what = newest.Created, "snapshot "+newest.Name
	} else {
		from, what = st.OldestUnsnapshotted, "the oldest record not in a snapshot"
	}
	// NB: a date after now (the wall clock went back, or the file carries
	// a wrong date) gives a negative age, and every_seconds then waited
	// until the clock caught up: an hour, or ten years with no snapshot
	// however long the log grew. Such a date says nothing about how long
	// ago it was: the trigger takes it as due. That costs at most one
	// snapshot, which is dated now and measures the next interval.
	ahead := ageKnown && from.After(in.Now)
	if ahead {
		plan.Notes = append(plan.Notes, fmt.Sprintf("%s is dated %s, after now (%s): the clock went back or the date is wrong, so its age is unknown and every_seconds takes it as due",
			what, from.UTC().Format(time.RFC3339), in.Now.UTC().Format(time.RFC3339)))
	}
	if st.RecordsSinceSnapshot == 0 {
		plan.Notes = append(plan.Notes, "no records since the newest snapshot: no new snapshot")
		return false
	}
	var age time.Duration
	if ageKnown {
		age = in.Now.Sub(from)
	}
	var fired, why []string
	if n := p.Snapshot.EveryRecords; n > 0 && st.RecordsSinceSnapshot >= uint64(n) {
		fired = append(fired, "every_records")
		why = append(why, fmt.Sprintf("%s since the newest snapshot (every_records=%d)", plural(st.RecordsSinceSnapshot, "record"), n))
	}
	if n := p.Snapshot.EveryBytes; n > 0 && st.BytesSinceSnapshot >= uint64(n) {
		fired = append(fired, "every_bytes")
		why = append(why, fmt.Sprintf("%d bytes since the newest snapshot (every_bytes=%d)", st.BytesSinceSnapshot, n))
	}
	if d := p.SnapshotInterval(); d > 0 && ageKnown && (ahead || age >= d) {
		fired = append(fired, "every_seconds")
		if ahead {
			why = append(why, fmt.Sprintf("%s is dated after now, so its age is unknown: taken as due (every_seconds=%d)", what, p.Snapshot.EverySeconds))
		} else {
			why = append(why, fmt.Sprintf("%s since the newest snapshot (every_seconds=%d)", age.Truncate(time.Second), p.Snapshot.EverySeconds))
		}
	}
	if len(fired) == 0 {
		ageText := "unknown"
		if ageKnown {
			ageText = age.Truncate(time.Second).String()
		}
		plan.Notes = append(plan.Notes, fmt.Sprintf("no snapshot trigger fired: %s, %d bytes, age %s since the newest snapshot",
			plural(st.RecordsSinceSnapshot, "record"), st.BytesSinceSnapshot, ageText))
		return false
	}
	plan.Actions = append(plan.Actions, Action{Kind: ActionCreateSnapshot, Trigger: fired[0], Reason: strings.Join(why, "; ")})
	return true
}

// cut is the truncation of one anchor.
type cut struct {
	anchor   string
	seq      uint64
	hash     segment.Hash
	segments []SealedSegment
	signed   string // what says a checkpoint covers it, for the reason
}

// planCuts finds, per anchor (sorted by id bytes), the sealed segments wholly
// at or below every kept snapshot's frontier seq.
func planCuts(segs []SealedSegment, kept []Info, checkpointed map[string]uint64, note func(string, ...any)) ([]cut, error) {
	if len(kept) == 0 {
		return nil, nil
	}
	byAnchor := map[string][]SealedSegment{}
	for _, s := range segs {
		byAnchor[s.Anchor] = append(byAnchor[s.Anchor], s)
	}
	anchors := make([]string, 0, len(byAnchor))
	for a := range byAnchor {
		anchors = append(anchors, a)
	}
	slices.Sort(anchors)
	var out []cut
	for _, a := range anchors {
		list := byAnchor[a]
		slices.SortFunc(list, func(x, y SealedSegment) int { return cmp.Compare(x.Segno, y.Segno) })
		for i, s := range list {
			if s.FirstSeq == 0 || s.LastSeq < s.FirstSeq {
				return nil, errs.New(errs.CodeInvalidInput, "compaction plan: anchor %q segment %d holds seqs %d..%d", a, s.Segno, s.FirstSeq, s.LastSeq).At(a, s.FirstSeq, "", 0)
			}
			if i > 0 && (s.Segno == list[i-1].Segno || s.FirstSeq != list[i-1].LastSeq+1) {
				return nil, errs.New(errs.CodeChainBroken, "compaction plan: anchor %q segment %d starts at seq %d but segment %d ends at seq %d",
					a, s.Segno, s.FirstSeq, list[i-1].Segno, list[i-1].LastSeq).At(a, list[i-1].LastSeq+1, "", 0)
			}
		}
		limit := kept[0].Frontier[a].Seq
		for _, k := range kept[1:] {
			limit = min(limit, k.Frontier[a].Seq)
		}
		var c cut
		for _, s := range list {
			if s.LastSeq > limit {
				break
			}
			c.segments = append(c.segments, s)
		}
		if checkpointed != nil {
			n := len(c.segments)
			for n > 0 && c.segments[n-1].LastSeq > checkpointed[a] {
				n--
			}
			if n < len(c.segments) {
				note("anchor %q: %d sealed segments below the oldest kept snapshot stay until a signed checkpoint covers them (the newest checkpoint this database stored holds %d of its records; `checkpoint create` signs one)",
					a, len(c.segments)-n, checkpointed[a])
			}
			c.segments = c.segments[:n]
			c.signed = fmt.Sprintf(" and by the newest checkpoint this database stored (%s)", plural(checkpointed[a], "record"))
		}
		if len(c.segments) == 0 {
			continue
		}
		last := c.segments[len(c.segments)-1]
		c.anchor, c.seq, c.hash = a, last.LastSeq, last.LastHash
		if c.hash.IsZero() {
			return nil, errs.New(errs.CodeInvalidInput, "compaction plan: anchor %q segment %d has no last hash", a, last.Segno)
		}
		for _, k := range kept {
			if h := k.Frontier[a]; h.Seq == c.seq && h.Hash != c.hash {
				return nil, errs.New(errs.CodeChainBroken, "compaction plan: snapshot %s says anchor %q seq %d is %s; segment %d seals it as %s",
					k.Name, a, c.seq, h.Hash, last.Segno, c.hash).At(a, c.seq, "", 0)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// WriteText renders the plan as a table:
//
//	#  ACTION           TARGET                   DETAIL                       HASH
//	1  create_snapshot  -                        every_records: …             -
//	2  delete_snapshot  snapshot-….snap          4096 bytes; older than …     blake3:…
//
// followed by the kept snapshots and the notes.
func (p Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "policy %s at %s\n", p.PolicyRef, p.Now.Format(time.RFC3339))
	if len(p.Actions) == 0 {
		b.WriteString("nothing to do\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tACTION\tTARGET\tDETAIL\tHASH")
		for i, a := range p.Actions {
			target, detail, hash := "-", a.Reason, "-"
			switch a.Kind {
			case ActionCreateSnapshot:
				detail = a.Trigger + ": " + a.Reason
			case ActionDeleteSnapshot:
				target, detail = a.Snapshot, fmt.Sprintf("%d bytes; %s", a.Bytes, a.Reason)
			case ActionRecordCut:
				target, detail = fmt.Sprintf("anchor %q", a.Anchor), fmt.Sprintf("cut at seq %d", a.CutSeq)
			case ActionRemoveSegment:
				target = fmt.Sprintf("anchor %q segment %d", a.Anchor, a.Segno)
				detail = fmt.Sprintf("seqs %d..%d, %d bytes", a.FirstSeq, a.LastSeq, a.Bytes)
			}
			if !a.Hash.IsZero() {
				hash = a.Hash.String()
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i+1, a.Kind, target, detail, hash)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Keep) > 0 {
		fmt.Fprintf(&b, "keep: %s\n", strings.Join(p.Keep, ", "))
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String returns the WriteText rendering.
func (p Plan) String() string {
	var b strings.Builder
	_ = p.WriteText(&b)
	return b.String()
}
