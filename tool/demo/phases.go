package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
)

// The demo's phases after the write and read-back checks: verify, merge,
// checkpoint, inclusion proof, snapshot, compaction, rebuild. Each adds one
// or more checks; an engine error fails the check and the demo goes on with
// what still makes sense.

// laterPhases runs the phases on the open database d.db.
func (d *demo) laterPhases() {
	d.verifyPhase("verify")
	d.mergePhase()
	cp := d.checkpointPhase()
	d.proofPhase(cp)
	d.snapshotPhase()
	d.compactPhase()
	d.rebuildPhase()
}

// verifyPhase runs the engine's full verify and adds its outcome as a check.
func (d *demo) verifyPhase(name string) {
	defer d.phases.step(name)()
	rep, err := d.db.Verify(d.ctx, engine.VerifyOptions{})
	if err != nil {
		d.add(name, false, err.Error())
		return
	}
	var ps []string
	for _, f := range rep.Failures {
		ps = append(ps, fmt.Sprintf("%s %s anchor=%q seq=%d: %s", f.Code, f.Reason, f.Anchor, f.Seq, f.Message))
	}
	d.add(name, rep.OK && len(ps) == 0, problems(ps,
		fmt.Sprintf("%s, %s, %s of segments: hashes, links, seals, index, trees, checkpoints", humanize.Plural(rep.Anchors, "anchor"), humanize.Plural(rep.Records, "record"), humanize.Bytes(rep.Bytes))))
}

// mergePhase streams the merged view at the current frontier and checks it
// against the merged root and the merged order.
func (d *demo) mergePhase() {
	defer d.phases.step("merge")()
	ctx := d.ctx
	f, err := d.db.Frontier(ctx)
	if err != nil {
		d.add("merge", false, err.Error())
		return
	}
	root, size, err := d.db.MergedRoot(ctx, f)
	if err != nil {
		d.add("merge", false, err.Error())
		return
	}
	var ps []string
	b := merge.NewRootBuilder()
	var n uint64
	var prev engine.Record
	start := time.Now()
	for p, err := range d.db.Merged(ctx, engine.MergedOptions{Frontier: f}) {
		if err != nil {
			ps = append(ps, err.Error())
			break
		}
		n++
		rec := p.Record
		switch {
		case p.Pos != n:
			ps = append(ps, fmt.Sprintf("record %d has position %d", n, p.Pos))
		case n > 1 && compareMerged(prev, rec) >= 0:
			ps = append(ps, fmt.Sprintf("position %d (%s #%d counter %d) does not follow (%s #%d counter %d)",
				p.Pos, rec.Anchor, rec.Seq, rec.Counter, prev.Anchor, prev.Seq, prev.Counter))
		case !f.Contains(rec.Anchor, rec.Seq):
			ps = append(ps, fmt.Sprintf("position %d (%s #%d) is outside the frontier", p.Pos, rec.Anchor, rec.Seq))
		}
		b.Append(rec.Hash)
		prev = engine.Record{Anchor: rec.Anchor, Seq: rec.Seq, Counter: rec.Counter}
		if len(ps) > 10 {
			break
		}
	}
	elapsed := time.Since(start)
	if n != f.Total() || n != size {
		ps = append(ps, fmt.Sprintf("the stream has %s, the frontier %d, the merged root covers %d", humanize.Plural(n, "record"), f.Total(), size))
	}
	if got := b.Root(); got != root {
		ps = append(ps, fmt.Sprintf("the streamed records hash to %s, MergedRoot says %s", got, root))
	}
	d.report.MergedRecords, d.report.MergedRoot = n, root
	if elapsed > 0 {
		d.report.MergeRecordsPerSec = float64(n) / elapsed.Seconds()
	}
	d.add("merge", len(ps) == 0, problems(ps, fmt.Sprintf("%s of %s at positions 1..%d in (counter, anchor) order; root %s",
		humanize.Plural(n, "record"), humanize.Plural(len(f.Anchors()), "anchor"), n, root)))
}

// checkpointPhase signs a checkpoint with a fresh key, kept beside the
// database, and opens it with the verifier key. It returns the checkpoint
// (nil if there is none).
func (d *demo) checkpointPhase() *proof.Checkpoint {
	defer d.phases.step("checkpoint")()
	ctx := d.ctx
	fail := func(err error) *proof.Checkpoint {
		d.add("checkpoint", false, err.Error())
		return nil
	}
	skey, vkey, err := proof.GenerateKeys("anchordb-demo")
	if err != nil {
		return fail(err)
	}
	prefix := filepath.Join(d.dir, "demo-checkpoint")
	if err := saveKey(prefix+".key", skey, 0o600); err != nil {
		return fail(err)
	}
	if err := saveKey(prefix+".pub", vkey, 0o644); err != nil {
		return fail(err)
	}
	d.report.KeyFile = prefix + ".key"
	d.skey = skey
	msg, created, err := d.db.CreateCheckpoint(ctx, skey)
	if err != nil {
		return fail(err)
	}
	st, err := d.db.Stats(ctx)
	if err != nil {
		return fail(err)
	}
	var ps []string
	cp, err := proof.OpenCheckpoint(msg, vkey)
	if err != nil {
		ps = append(ps, "the signed note does not open with its verifier key: "+err.Error())
	} else {
		if cp.Root != created.Root || cp.Records != st.Records || cp.Anchors != st.Anchors {
			ps = append(ps, fmt.Sprintf("the note says %s, %s, root %s; the database has %s, %s (root at creation %s)",
				humanize.Plural(cp.Anchors, "anchor"), humanize.Plural(cp.Records, "record"), cp.Root, humanize.Plural(st.Anchors, "anchor"), humanize.Plural(st.Records, "record"), created.Root))
		}
		if body, err := engine.ParseCheckpointNote(msg); err != nil || body.Root != cp.Root {
			ps = append(ps, fmt.Sprintf("the note's body parses to %v (%v)", body, err))
		}
	}
	_, otherKey, err := proof.GenerateKeys("someone-else")
	if err == nil {
		if _, err := proof.OpenCheckpoint(msg, otherKey); engine.CodeOf(err) != errs.CodeSignatureInvalid {
			ps = append(ps, fmt.Sprintf("opening with another key gave %v, want AUTH_003", err))
		}
	}
	d.add("checkpoint", len(ps) == 0, problems(ps, fmt.Sprintf("%s, %s, root %s: opens with %s.pub, not with another key",
		humanize.Plural(created.Anchors, "anchor"), humanize.Plural(created.Records, "record"), created.Root, filepath.Base(prefix))))
	if cp == nil {
		return created
	}
	return cp
}

// proofPhase proves one acknowledged record's inclusion at the checkpoint's
// size and verifies the proof offline, from its JSON.
func (d *demo) proofPhase(cp *proof.Checkpoint) {
	defer d.phases.step("inclusion proof")()
	if cp == nil || len(d.writes) == 0 {
		d.add("inclusion proof", false, "no checkpoint to prove against")
		return
	}
	w := d.writes[len(d.writes)/2].receipt
	entry, ok := cp.Entry(w.Anchor)
	if !ok {
		d.add("inclusion proof", false, fmt.Sprintf("the checkpoint has no entry for anchor %q", w.Anchor))
		return
	}
	p, err := d.db.ProveInclusion(d.ctx, w.Anchor, w.Seq, entry.Size)
	if err != nil {
		d.add("inclusion proof", false, err.Error())
		return
	}
	var ps []string
	if p.Leaf != w.Hash {
		ps = append(ps, fmt.Sprintf("the proof's leaf %s; the receipt has %s", p.Leaf, w.Hash))
	}
	// Offline, from the JSON alone, and held to the signed checkpoint: the
	// record is in the anchor's tree, whose root is the checkpoint's entry,
	// which is a leaf of the signed frontier root.
	fp, err := cp.ProveAnchor(w.Anchor)
	for _, pr := range []any{p, fp} {
		var data []byte
		var v proof.Verified
		if err == nil {
			data, err = json.Marshal(pr)
		}
		if err == nil {
			v, err = proof.VerifyJSON(data)
		}
		if err == nil {
			err = cp.Bind(v)
		}
	}
	if err != nil {
		ps = append(ps, "the proofs do not verify offline against the checkpoint: "+err.Error())
		fp = &proof.FrontierProof{}
	}
	bad := *p
	bad.Leaf[0] ^= 1
	if proof.VerifyInclusionProof(&bad) == nil {
		ps = append(ps, "a proof with a changed leaf verifies")
	}
	d.add("inclusion proof", len(ps) == 0, problems(ps, fmt.Sprintf("%s #%d in a tree of %d (%s), and that tree in the checkpoint's frontier (%s), verify offline against the signed root; a changed leaf does not",
		w.Anchor, w.Seq, p.Size, humanize.Plural(len(p.Proof), "hash", "hashes"), humanize.Plural(len(fp.Proof), "hash", "hashes"))))
}

// snapshotPhase takes a snapshot and proves it by replay, and checks its
// state hash against the state the acknowledged writes imply.
func (d *demo) snapshotPhase() {
	defer d.phases.step("snapshot")()
	ctx := d.ctx
	info, err := d.db.CreateSnapshot(ctx, "")
	if err != nil {
		d.add("snapshot", false, err.Error())
		return
	}
	d.report.Snapshot = info.Name
	v, err := d.db.VerifySnapshot(ctx, info.Path)
	if err != nil {
		d.add("snapshot", false, err.Error())
		return
	}
	var ps []string
	total := merge.Frontier(info.Frontier.Seqs()).Total() // the records the snapshot covers
	if !v.Replayed || v.ReplayedRecords != total || v.ReplayStateHash != info.StateHash {
		ps = append(ps, fmt.Sprintf("replayed=%v: %d of %s, state %s; the file says %s (%s)",
			v.Replayed, v.ReplayedRecords, humanize.Plural(total, "record"), v.ReplayStateHash, info.StateHash, v.Note))
	}
	want, live := modelStateHash(d.writes)
	if want != info.StateHash || uint64(live) != info.Entries {
		ps = append(ps, fmt.Sprintf("the snapshot holds %s with state %s; the acknowledged writes imply %s with state %s",
			humanize.Plural(info.Entries, "key"), info.StateHash, humanize.Plural(live, "key"), want))
	}
	d.add("snapshot", len(ps) == 0, problems(ps, fmt.Sprintf("%s: %s, %s; replay of %s proves state %s",
		info.Name, humanize.Plural(info.Entries, "key"), humanize.Bytes(info.Size), humanize.Plural(v.ReplayedRecords, "record"), info.StateHash)))
}

// compactPhase applies a truncating policy three times, with a second round
// of writes after the first: the first run truncates below the demo's
// snapshot, the second snapshots the new writes (keeping the old snapshot,
// the newest, until the new one is there), the third deletes the old
// snapshot and truncates below the new one. Then the state, verify, the
// kept snapshots, the audit log and idempotent retries are checked.
func (d *demo) compactPhase() {
	ctx := d.ctx
	round2 := max(1, d.cfg.Records/4)
	policy := snapshot.Policy{Version: snapshot.PolicyVersion,
		Snapshot:      snapshot.Triggers{EveryRecords: int64(max(1, d.cfg.Writers*round2/2))},
		KeepSnapshots: 1, RawLog: snapshot.RawLogTruncate, VerifyBeforeDelete: true}
	d.report.Policy = string(policy.Canonical())
	var ps []string
	var planned int64
	compact := func() bool {
		defer d.phases.step(fmt.Sprintf("compaction %d", len(d.report.Compactions)+1))()
		// A cut lies inside a signed checkpoint (CONTRACT §6): sign one of
		// everything written so far with the demo's key first.
		if d.skey != "" {
			if _, _, err := d.db.CreateCheckpoint(ctx, d.skey); err != nil {
				ps = append(ps, fmt.Sprintf("checkpoint before compaction %d: %v", len(d.report.Compactions)+1, err))
				return false
			}
		}
		res, err := d.db.Compact(ctx, policy, engine.CompactOptions{Apply: true})
		if err != nil {
			ps = append(ps, fmt.Sprintf("compaction %d: %v", len(d.report.Compactions)+1, err))
			return false
		}
		c := Compaction{Actions: len(res.Plan.Actions), RemovedBytes: res.RemovedBytes, StubBytes: res.StubBytes}
		if res.Created != nil {
			c.Created = res.Created.Name
		}
		for _, a := range res.Plan.Actions {
			switch a.Kind {
			case snapshot.ActionDeleteSnapshot:
				c.SnapshotsDelete++
			case snapshot.ActionRemoveSegment:
				c.SegmentsRemoved++
				planned += a.Bytes
			}
		}
		d.report.Compactions = append(d.report.Compactions, c)
		d.report.SegmentsRemoved += c.SegmentsRemoved
		d.report.RemovedBytes += c.RemovedBytes
		d.report.StubBytes += c.StubBytes
		d.report.NetBytes += res.NetBytes()
		return true
	}
	ok := compact()
	if ok {
		writes, _, err := d.write(2, round2)
		if err != nil {
			ps = append(ps, "second round of writes: "+err.Error())
			ok = false
		}
		d.writes = append(d.writes, writes...)
		d.report.SecondRoundRecords = len(writes)
	}
	ok = ok && compact() && compact()
	if ok && d.report.RemovedBytes != planned {
		ps = append(ps, fmt.Sprintf("the plans removed %d bytes of segments, the compactions report %d", planned, d.report.RemovedBytes))
	}
	// Only sealed segments are removed: a demo too small to seal one (each
	// anchor's log fits in its first segment) has nothing to truncate.
	if ok && d.report.SegmentsRemoved == 0 && d.report.Segments > d.report.Anchors {
		ps = append(ps, fmt.Sprintf("nothing was truncated (segments of %s)", humanize.Bytes(d.cfg.SegmentSize)))
	}
	var runs []string
	for _, c := range d.report.Compactions {
		s := humanize.Plural(c.Actions, "action")
		if c.Created != "" {
			s += ", 1 snapshot created"
		}
		if c.SnapshotsDelete > 0 {
			s += fmt.Sprintf(", %d deleted", c.SnapshotsDelete)
		}
		if c.SegmentsRemoved > 0 {
			s += fmt.Sprintf(", %s (%s) removed for %s of stubs", humanize.Plural(c.SegmentsRemoved, "segment"), humanize.Bytes(c.RemovedBytes), humanize.Bytes(c.StubBytes))
		}
		runs = append(runs, s)
	}
	d.add("compact", len(ps) == 0, problems(ps, fmt.Sprintf("keep 1, raw_log truncate; runs: [%s]; %s written between the first two",
		strings.Join(runs, "; "), humanize.Plural(d.report.SecondRoundRecords, "record"))))

	d.checkState("state after compaction")
	d.verifyPhase("verify after compaction")
	d.checkSnapshotsAndAudit()
	d.checkRetries("idempotency after compaction")
}

// checkSnapshotsAndAudit verifies every kept snapshot and the audit log.
func (d *demo) checkSnapshotsAndAudit() {
	defer d.phases.step("snapshots and audit log")()
	ctx := d.ctx
	var ps, kept []string
	list, err := d.db.Snapshots(ctx)
	if err != nil {
		ps = append(ps, err.Error())
	}
	for _, s := range list {
		v, err := d.db.VerifySnapshot(ctx, s.Path)
		if err != nil {
			ps = append(ps, fmt.Sprintf("%s: %v", s.Name, err))
			continue
		}
		how := "replayed"
		switch {
		case !v.Replayed:
			how = "file and state hash verify; no replay below the cut"
		case v.Base != "":
			how = "replayed from base " + v.Base
		}
		kept = append(kept, s.Name+" ("+how+")")
	}
	head, err := d.db.VerifyAuditLog(ctx)
	if err != nil {
		ps = append(ps, "audit log: "+err.Error())
	}
	d.add("snapshots and audit log", len(ps) == 0 && len(list) > 0, problems(ps,
		fmt.Sprintf("%d kept: %s; audit log of %s verifies", len(list), strings.Join(kept, ", "), humanize.Plural(head.Lines, "line"))))
}

// checkRetries retries the first idempotent append on each anchor: each must
// come back as a duplicate with its original receipt, however long ago it
// was written and whatever compaction did since.
func (d *demo) checkRetries(name string) {
	defer d.phases.step(name)()
	var ps []string
	n := 0
	seen := map[string]bool{}
	for _, w := range d.writes {
		if len(w.entry.IdempotencyKey) == 0 || seen[w.entry.Anchor] {
			continue
		}
		seen[w.entry.Anchor] = true
		n++
		r, err := d.db.Append(d.ctx, w.entry)
		switch {
		case err != nil:
			ps = append(ps, fmt.Sprintf("retry of %s #%d: %v", w.receipt.Anchor, w.receipt.Seq, err))
		case !r.Duplicate || r.Seq != w.receipt.Seq || r.Hash != w.receipt.Hash:
			ps = append(ps, fmt.Sprintf("retry of %s #%d (idempotency key %q) appended #%d instead of answering with the original receipt",
				w.receipt.Anchor, w.receipt.Seq, w.entry.IdempotencyKey, r.Seq))
			if !r.Duplicate {
				// It was appended: the model must know.
				d.writes = append(d.writes, ack{entry: w.entry, receipt: r})
			}
		}
	}
	d.add(name, len(ps) == 0, problems(ps, fmt.Sprintf("%s of early idempotent appends answered with their original receipts", humanize.Plural(n, "retry", "retries"))))
}

// demoSnapshot is what must survive a rebuild unchanged.
type demoSnapshot struct {
	heads map[string]engine.AnchorInfo
	root  segment.Hash
	size  uint64
	state segment.Hash
	keys  uint64
}

func (d *demo) capture() (demoSnapshot, error) {
	ctx := d.ctx
	s := demoSnapshot{heads: map[string]engine.AnchorInfo{}}
	for info, err := range d.db.Anchors(ctx) {
		if err != nil {
			return s, err
		}
		s.heads[info.ID] = info
	}
	var err error
	if s.root, s.size, err = d.db.MergedRoot(ctx, nil); err != nil {
		return s, err
	}
	h := snapshot.NewStateHasher()
	for v, err := range d.db.Scan(ctx, nil) {
		if err != nil {
			return s, err
		}
		if err := h.Add(v.Key, v.Value); err != nil {
			return s, err
		}
	}
	s.state, s.keys = h.Sum(), h.Count()
	return s, nil
}

// diff lists how after differs from s.
func (s demoSnapshot) diff(after demoSnapshot) []string {
	var ps []string
	for id, h := range s.heads {
		a, ok := after.heads[id]
		if !ok || a.Records != h.Records || a.HeadHash != h.HeadHash || a.LastCounter != h.LastCounter {
			ps = append(ps, fmt.Sprintf("anchor %s: head #%d %s counter %d before, #%d %s counter %d after",
				id, h.Records, h.HeadHash, h.LastCounter, a.Records, a.HeadHash, a.LastCounter))
		}
	}
	if len(after.heads) != len(s.heads) {
		ps = append(ps, fmt.Sprintf("%s before, %d after", humanize.Plural(len(s.heads), "anchor"), len(after.heads)))
	}
	if after.root != s.root || after.size != s.size {
		ps = append(ps, fmt.Sprintf("merged root %s over %s before, %s over %d after", s.root, humanize.Plural(s.size, "record"), after.root, after.size))
	}
	if after.state != s.state || after.keys != s.keys {
		ps = append(ps, fmt.Sprintf("state %s of %s before, %s of %d after", s.state, humanize.Plural(s.keys, "key"), after.state, after.keys))
	}
	return ps
}

// rebuildPhase closes the database, rebuilds its index from the newest
// snapshot, and checks that heads, merged root and state are unchanged;
// then verifies and retries again.
func (d *demo) rebuildPhase() {
	defer d.phases.step("rebuild")()
	ctx := d.ctx
	before, err := d.capture()
	if err != nil {
		d.add("rebuild", false, "reading the state before: "+err.Error())
		return
	}
	err = d.db.Close()
	d.db = nil
	if err != nil {
		d.add("rebuild", false, "close: "+err.Error())
		return
	}
	opts := d.options()
	opts.Logger = errorsOnly{d.cfg.Logger} // the report below says what the rebuild did
	start := time.Now()
	plan, err := engine.RebuildIndexWith(ctx, d.dir, opts, engine.RebuildOptions{Apply: true, FromSnapshot: true})
	elapsed := time.Since(start)
	d.report.RebuildSeconds = elapsed.Seconds()
	if err != nil {
		d.add("rebuild", false, err.Error())
		return
	}
	var ps []string
	from := ""
	for _, ev := range plan.Report.Events {
		switch ev.Kind {
		case engine.EventStateFromSnapshot:
			from = filepath.Base(ev.File)
		case engine.EventFastRebuildAbandoned, engine.EventSnapshotSkipped, engine.EventDamaged:
			ps = append(ps, ev.String())
		}
	}
	if from == "" {
		ps = append(ps, "the rebuild did not start from a snapshot")
	}
	if err := d.open(); err != nil {
		d.add("rebuild", false, "reopen after the rebuild: "+err.Error())
		return
	}
	after, err := d.capture()
	if err != nil {
		ps = append(ps, "reading the state after: "+err.Error())
	} else {
		ps = append(ps, before.diff(after)...)
	}
	d.add("rebuild", len(ps) == 0, problems(ps, fmt.Sprintf("from %s in %.3fs (%s, %s): %s, merged root and state of %s unchanged",
		from, elapsed.Seconds(), humanize.Plural(plan.Segments, "segment file"), humanize.Plural(plan.Stubs, "stub"), humanize.Plural(len(after.heads), "head"), humanize.Plural(after.keys, "key"))))
	d.checkState("state after rebuild")
	d.verifyPhase("verify after rebuild")
	d.checkRetries("idempotency after rebuild")
	err = d.db.Close()
	d.db = nil
	d.add("close after rebuild", err == nil, errDetail(err, "closed cleanly"))
}

// checkState adds the check that Get and Scan agree with the state the
// acknowledged writes imply (the last put or delete of each key in merged
// order), whatever compaction removed from the logs.
func (d *demo) checkState(name string) {
	defer d.phases.step(name)()
	ctx := d.ctx
	last := modelState(d.writes)
	var ps []string
	live := 0
	for key, w := range last {
		v, err := d.db.Get(ctx, []byte(key))
		switch {
		case w.entry.Type == segment.TypeDelete:
			if !errors.Is(err, engine.ErrNotFound) {
				ps = append(ps, fmt.Sprintf("get %q: want not found, got %v", key, err))
			}
		case err != nil:
			ps = append(ps, fmt.Sprintf("get %q: %v", key, err))
		default:
			live++
			if v.Anchor != w.receipt.Anchor || v.Seq != w.receipt.Seq || !bytes.Equal(v.Value, w.entry.Value) {
				ps = append(ps, fmt.Sprintf("get %q: %s #%d, want %s #%d", key, v.Anchor, v.Seq, w.receipt.Anchor, w.receipt.Seq))
			}
		}
	}
	scanned := 0
	for v, err := range d.db.Scan(ctx, nil) {
		if err != nil {
			ps = append(ps, "scan: "+err.Error())
			break
		}
		scanned++
		if w, ok := last[string(v.Key)]; !ok || w.entry.Type != segment.TypePut || v.Seq != w.receipt.Seq || v.Anchor != w.receipt.Anchor {
			ps = append(ps, fmt.Sprintf("scan: key %q at %s #%d is not the last put", v.Key, v.Anchor, v.Seq))
		}
	}
	if scanned != live {
		ps = append(ps, fmt.Sprintf("scan found %d live keys, get %d", scanned, live))
	}
	d.add(name, len(ps) == 0, problems(ps, fmt.Sprintf("%s (%d live) as the %d acknowledged writes imply", humanize.Plural(len(last), "key"), live, len(d.writes))))
}

// modelState returns, for each key, the acknowledged write that decides it:
// the last put or delete in merged order (counter, anchor id bytes).
func modelState(writes []ack) map[string]ack {
	kv := make([]ack, 0, len(writes))
	for _, w := range writes {
		if w.entry.Type == segment.TypePut || w.entry.Type == segment.TypeDelete {
			kv = append(kv, w)
		}
	}
	slices.SortFunc(kv, func(a, b ack) int {
		return merge.CompareKeys(a.receipt.Counter, a.receipt.Anchor, b.receipt.Counter, b.receipt.Anchor)
	})
	last := make(map[string]ack)
	for _, w := range kv {
		last[string(w.entry.Key)] = w
	}
	return last
}

// modelStateHash is the state hash (CONTRACT §6) of the live keys the writes
// imply, and their number.
func modelStateHash(writes []ack) (segment.Hash, int) {
	last := modelState(writes)
	keys := make([]string, 0, len(last))
	for k, w := range last {
		if w.entry.Type == segment.TypePut {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	h := snapshot.NewStateHasher()
	for _, k := range keys {
		_ = h.Add([]byte(k), last[k].entry.Value)
	}
	return h.Sum(), len(keys)
}

// errorsOnly passes on a logger's errors and drops its notes.
type errorsOnly struct{ l engine.Logger }

func (errorsOnly) Infof(string, ...any) {}

func (e errorsOnly) Errorf(format string, args ...any) {
	if e.l != nil {
		e.l.Errorf(format, args...)
	}
}

// saveKey writes key and a newline to a new file at path with mode perm
// (whatever the umask), durably, as anchordb keygen writes its key files.
func saveKey(path, key string, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return errs.New(errs.CodeInvalidInput, "%s exists", path)
		}
		return errs.Wrap(errs.CodeWriteFailed, err, "create %s", path)
	}
	err = f.Chmod(perm)
	if err == nil {
		_, err = io.WriteString(f, key+"\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errs.Wrap(errs.CodeWriteFailed, err, "write %s", path)
	}
	return nil
}
