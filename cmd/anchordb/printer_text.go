package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/outbox"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/anchordb/anchordb/tool/demo"
	"github.com/anchordb/anchordb/tool/importer"
)

// textPrinter prints for a person: a line a result, errors on stderr.
// With quiet it leaves out confirmations and summaries (a receipt, "verify
// ok", a compaction's plan); records, proofs, notes, findings and errors
// are always printed.
type textPrinter struct {
	out    *output
	stderr io.Writer
	quiet  bool
}

func (p *textPrinter) Receipt(r engine.Receipt) {
	if p.quiet {
		return
	}
	dup := ""
	if r.Duplicate {
		dup = " (duplicate: nothing appended)"
	}
	p.out.linef("%s #%d counter=%d %s%s", display([]byte(r.Anchor)), r.Seq, r.Counter, r.Hash, dup)
}

func (p *textPrinter) Record(r *engine.Record) { p.out.linef("%s", recordLine(r)) }

func (p *textPrinter) Found(r *engine.Record) { p.out.linef("%s", recordLine(r)) }

// Value prints a value's bytes as they are, without a newline (get --raw).
func (p *textPrinter) Value(v []byte) { p.out.write(v) }

func (p *textPrinter) NotFound(key []byte) {
	if !p.quiet {
		fmt.Fprintf(p.stderr, "not found: %s\n", display(key))
	}
}

func (p *textPrinter) Merged(m engine.Positioned) {
	p.out.linef("pos=%d %s", m.Pos, recordLine(&m.Record))
}

func (p *textPrinter) MergedRoot(root segment.Hash, records uint64, f merge.Frontier) {
	p.out.linef("merged root %s over %s of %s", root, humanize.Plural(records, "record"), humanize.Plural(len(f.Anchors()), "anchor"))
}

func (p *textPrinter) Verify(rep engine.VerifyReport) {
	status := "ok"
	if !rep.OK {
		status = fmt.Sprintf("FAILED: %s", humanize.Plural(len(rep.Failures), "finding"))
	}
	if rep.OK && p.quiet {
		return
	}
	p.out.linef("verify %s: %s, %s, %s of segments", status, humanize.Plural(rep.Anchors, "anchor"), humanize.Plural(rep.Records, "record"), humanize.Bytes(rep.Bytes))
	if f := rep.Files; f != nil {
		p.out.linef("read from the files alone, without the index (%s); not checked: %s", f.Why, strings.Join(f.Unchecked, ", "))
		for _, t := range f.Tails {
			p.out.linef("tail anchor=%s seq=%d file=%s offset=%d: %s not read as records (%s): a write in progress, or for the next open to recover",
				display([]byte(t.Anchor)), t.Seq, t.File, t.Offset, humanize.Plural(t.Bytes, "byte"), t.Message)
		}
	}
	for _, f := range rep.Failures {
		var loc []string
		if f.Anchor != "" {
			loc = append(loc, "anchor="+display([]byte(f.Anchor)))
		}
		if f.Seq != 0 {
			loc = append(loc, fmt.Sprintf("seq=%d", f.Seq))
		}
		if f.File != "" {
			loc = append(loc, fmt.Sprintf("file=%s offset=%d", f.File, f.Offset))
		}
		p.out.linef("%s %s %s: %s", f.Code, f.Reason, strings.Join(loc, " "), f.Message)
	}
}

func (p *textPrinter) Keygen(k keyPair) {
	p.out.linef("%s", k.verifierKey)
	if !p.quiet {
		fmt.Fprintf(p.stderr, "wrote %s (secret, mode 0600) and %s\n", k.keyFile, k.pubFile)
	}
}

// CheckpointCreated prints the signed note as it is stored.
func (p *textPrinter) CheckpointCreated(note []byte, _ *proof.Checkpoint, _ string) {
	p.out.write(note)
}

func (p *textPrinter) CheckpointVerified(cp *proof.Checkpoint) {
	if !p.quiet {
		p.out.linef("checkpoint verified: %s, %s, %s, root %s, time %s",
			cp.Origin, humanize.Plural(cp.Anchors, "anchor"), humanize.Plural(cp.Records, "record"), cp.Root, cp.Time.Format(time.RFC3339Nano))
	}
}

// Proof prints the proof's JSON: it is the output in either mode.
func (p *textPrinter) Proof(v any) { p.out.json(v) }

func (p *textPrinter) ProofVerified(v proofCheck) {
	if !p.quiet {
		p.out.linef("verified %s", v.description)
	}
}

func (p *textPrinter) Ingest(rep engine.IngestReport) {
	if !p.quiet {
		for _, a := range rep.Anchors {
			p.out.linef("%-10s %s: had %d, arrived %d, appended %d, head %s", a.Status, display([]byte(a.Anchor)),
				a.Had, a.Arrived, a.Appended, a.Head)
		}
	}
	p.out.linef("ingested %s on %s from %s", humanize.Plural(rep.Appended, "record"), humanize.Plural(len(rep.Anchors), "anchor"), rep.From)
}

func (p *textPrinter) Import(s importer.Summary) {
	if !p.quiet {
		p.out.linef("imported %s, %s, from %s", humanize.Plural(s.Imported, "record"), humanize.Plural(s.Duplicates, "duplicate"), humanize.Plural(s.Lines, "line"))
	}
}

func (p *textPrinter) Stats(r statsReport) {
	s, m := r.stats, r.stats.Metrics
	rows := []struct {
		name  string
		value any
	}{
		{"dir", s.Dir},
		{"id", s.ID},
		{"durability", s.Durability},
		{"anchors", s.Anchors},
		{"records", s.Records},
		{"damaged anchors", s.DamagedAnchors},
		{"segment files", s.SegmentFiles},
		{"segment bytes", fmt.Sprintf("%d (%s)", s.SegmentBytes, humanize.Bytes(s.SegmentBytes))},
		{"index bytes", fmt.Sprintf("%d (%s)", s.IndexBytes, humanize.Bytes(int64(s.IndexBytes)))},
		{"in flight", fmt.Sprintf("%s, %d bytes", humanize.Plural(s.InFlightRecords, "record"), s.InFlightBytes)},
		{"open segment files", s.OpenFiles},
		{"clock", s.Clock},
		{"snapshots", s.Snapshots},
		{"unsnapshotted", unsnapshottedText(s)},
		{"since open", fmt.Sprintf("%s in %s, %s, %s of journal, %s, %s, %s",
			humanize.Plural(m.Records, "record"), humanize.Plural(m.Groups, "commit group"), humanize.Plural(m.JournalSyncs, "journal sync"), humanize.Bytes(int64(m.JournalBytes)),
			humanize.Plural(m.SegmentWrites, "segment write"), humanize.Plural(m.Seals, "seal"), humanize.Plural(m.Settles, "settle"))},
		{"commit groups", fmt.Sprintf("records a group p50 %d, p99 %d (bucket bounds); journal fdatasync p50 %s, p99 %s",
			m.GroupRecordsP50, m.GroupRecordsP99, m.SyncLatencyP50, m.SyncLatencyP99)},
		{"duplicates", m.Duplicates},
		{"refused", fmt.Sprintf("CAP_001 %d, CAP_002 %d, CAP_003 %d", m.Refusals.CapacityExhausted,
			m.Refusals.QueueFull, m.Refusals.RateLimited)},
		{"last close", map[bool]string{true: "clean", false: "unclean (recovery ran)"}[r.recovery.Clean]},
	}
	for _, row := range rows {
		p.out.linef("%-19s %v", row.name+":", row.value)
	}
	if r.recovery.Rebuilt {
		p.out.linef("%-19s %s", "index:", "rebuilt from the segments")
	}
	for _, d := range r.damaged {
		p.out.linef("%-19s %s: %s", "damaged:", display([]byte(d.Anchor)), d.Damage)
	}
	for _, ev := range r.recovery.Events {
		line := ev.Kind
		if ev.Anchor != "" {
			line += " anchor=" + display([]byte(ev.Anchor))
		}
		if ev.File != "" {
			line += fmt.Sprintf(" file=%s offset=%d", ev.File, ev.Offset)
		}
		if ev.Err != nil {
			line += ": " + string(codeOf(ev.Err)) + " " + messageOf(ev.Err)
		}
		p.out.linef("%-19s %s", "recovery:", line)
	}
}

// unsnapshottedText describes the records after the newest snapshot.
func unsnapshottedText(s engine.Stats) string {
	if s.RecordsUnsnapshotted == 0 {
		return "0 records"
	}
	if s.OldestUnsnapshottedAfterNow {
		return fmt.Sprintf("%s, the oldest dated after now (the clock went back, or its date is wrong): its age is unknown", humanize.Plural(s.RecordsUnsnapshotted, "record"))
	}
	return fmt.Sprintf("%s, the oldest %s old", humanize.Plural(s.RecordsUnsnapshotted, "record"), s.OldestUnsnapshottedAge.Round(time.Millisecond))
}

func (p *textPrinter) Compaction(res engine.CompactionResult) {
	if p.quiet && !res.Applied {
		return
	}
	var b strings.Builder
	_ = res.Plan.WriteText(&b)
	if !p.quiet {
		p.out.write([]byte(b.String()))
	}
	if !res.Applied {
		if len(res.Plan.Actions) > 0 {
			p.out.linef("dry run: nothing was changed; run with --apply to carry the plan out")
		}
		return
	}
	var deleted, cuts, removed int
	for _, a := range res.Plan.Actions {
		switch a.Kind {
		case snapshot.ActionDeleteSnapshot:
			deleted++
		case snapshot.ActionRecordCut:
			cuts++
		case snapshot.ActionRemoveSegment:
			removed++
		}
	}
	created := "no snapshot created"
	if res.Created != nil {
		created = "created " + res.Created.Name
	}
	p.out.linef("applied %s: %s, %s deleted, %s recorded, %s removed (%s; stubs of %s written in their place: %s)",
		humanize.Plural(len(res.Plan.Actions), "action"), created, humanize.Plural(deleted, "snapshot"), humanize.Plural(cuts, "cut"), humanize.Plural(removed, "segment"),
		humanize.Bytes(res.RemovedBytes), humanize.Bytes(res.StubBytes), netText(res.NetBytes()))
}

func (p *textPrinter) SnapshotCreated(info snapshot.Info) {
	if p.quiet {
		p.out.linef("%s", info.Name)
		return
	}
	p.out.linef("snapshot %s: %s at a frontier of %s and %s, %s, state %s",
		info.Name, humanize.Plural(info.Entries, "key"), humanize.Plural(len(info.Frontier), "anchor"), humanize.Plural(frontierRecords(info.Frontier), "record"), humanize.Bytes(info.Size), info.StateHash)
}

func (p *textPrinter) SnapshotList(dir string, list []snapshot.Info, audited []bool) {
	if len(list) == 0 {
		if !p.quiet {
			p.out.linef("no snapshots in %s", dir)
		}
		return
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tKEYS\tANCHORS\tRECORDS\tSIZE\tSTATE HASH\tPOLICY\tAUDITED")
	foreign := 0
	for i, s := range list {
		if s.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\tUNREADABLE (%s)\t-\t-\n", s.Name, createdText(s.Created), codeOf(s.Err))
			continue
		}
		policy := s.PolicyRef
		if policy == "" {
			policy = "-"
		}
		yes := "yes"
		if !audited[i] {
			yes = "NO"
			foreign++
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Name, createdText(s.Created), s.Entries, len(s.Frontier),
			frontierRecords(s.Frontier), humanize.Bytes(s.Size), s.StateHash, policy, yes)
	}

	_ = tw.Flush()
	for _, s := range list {
		if s.Err != nil {
			fmt.Fprintf(&b, "unreadable %s: %s\n", s.Name, errorLine(s.Err))
		}
	}
	if foreign > 0 {
		fmt.Fprintf(&b, "%d not in the audit log as the database's (AUDITED NO): compaction neither counts nor deletes them\n", foreign)
	}
	p.out.write([]byte(b.String()))
}

func createdText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func (p *textPrinter) NoSnapshotsToVerify(dir string) {
	if !p.quiet {
		p.out.linef("no snapshots to verify in %s", dir)
	}
}

func (p *textPrinter) SnapshotVerified(name string, v engine.SnapshotVerification) {
	if p.quiet {
		return
	}
	unaudited := ""
	if !v.Audited {
		unaudited = "; not in the audit log as the database's: compaction neither counts nor deletes it"
	}
	switch {
	case !v.Replayed:
		p.out.linef("ok   %s: file and state hash verify (%s); %s", name, humanize.Plural(v.Info.Entries, "key"), v.Note)
	case v.Base != "":
		p.out.linef("ok   %s: replay of %s from base %s gives state %s%s", name, humanize.Plural(v.ReplayedRecords, "record"), v.Base, v.ReplayStateHash, unaudited)
	default:
		p.out.linef("ok   %s: replay of %s from genesis gives state %s%s", name, humanize.Plural(v.ReplayedRecords, "record"), v.ReplayStateHash, unaudited)
	}
}

func (p *textPrinter) SnapshotFailed(name, _ string, err error) {
	p.out.linef("FAIL %s: %s", name, errorLine(err))
}

func (p *textPrinter) SnapshotRetired(r engine.RetiredSnapshot) {
	where := "its file was gone already"
	if r.MovedTo != "" {
		where = "moved to " + r.MovedTo
	}
	p.out.linef("retired %s (%s %s: %s): %s; the audit log records it", r.Name, r.Finding.Code, r.Finding.Reason, r.Finding.Message, where)
}

func (p *textPrinter) Rebuild(r rebuildReport) {
	plan := r.plan
	what := fromText(r.fromSnapshot)
	if !plan.Applied {
		p.out.linef("rebuild-index (dry run): would drop the index of %s and rebuild it %sfrom %s, %s (%s) and %s of truncated segments",
			plan.Dir, what, humanize.Plural(plan.Anchors, "anchor"), humanize.Plural(plan.Segments, "segment file"), humanize.Bytes(plan.Bytes), humanize.Plural(plan.Stubs, "stub"))
		if !p.quiet {
			p.out.linef("nothing was changed; run with --apply to rebuild")
		}
		return
	}
	p.out.linef("rebuilt the index of %s %sfrom %s, %s (%s) and %s in %.3fs",
		plan.Dir, what, humanize.Plural(plan.Anchors, "anchor"), humanize.Plural(plan.Segments, "segment file"), humanize.Bytes(plan.Bytes), humanize.Plural(plan.Stubs, "stub"), r.seconds)
	if p.quiet {
		return
	}
	for _, ev := range plan.Report.Events {
		line := ev.Kind
		if ev.Anchor != "" {
			line += " anchor=" + display([]byte(ev.Anchor))
		}
		if ev.File != "" {
			line += " file=" + ev.File
		}
		if ev.Records > 0 {
			line += fmt.Sprintf(" records=%d", ev.Records)
		}
		if ev.Err != nil {
			line += ": " + string(codeOf(ev.Err)) + " " + messageOf(ev.Err)
		}
		p.out.linef("  %s", line)
	}
}

func fromText(fromSnapshot bool) string {
	if fromSnapshot {
		return "starting at the newest audited snapshot that verifies, "
	}
	return ""
}

func (p *textPrinter) OutboxEntry(en *outbox.Entry) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s attempts=%d", display([]byte(en.Outbox)), display([]byte(en.ID)), en.State, en.Attempts)
	switch en.State {
	case outbox.StatePending:
		fmt.Fprintf(&b, " next=%s", formatTime(en.NextAttemptAt))
	case outbox.StateInflight:
		fmt.Fprintf(&b, " worker=%s token=%d expires=%s", display([]byte(en.Lease.Worker)), en.Lease.Token, formatTime(en.Lease.ExpiresAt))
	case outbox.StateDone:
		fmt.Fprintf(&b, " done=%s", formatTime(en.DoneAt))
	case outbox.StateDead:
		fmt.Fprintf(&b, " dead=%s", formatTime(en.DeadAt))
	case outbox.StateAborted:
		fmt.Fprintf(&b, " superseded_by=%s", display([]byte(en.SupersededBy)))
	}
	if en.LastError != nil {
		fmt.Fprintf(&b, " last_error=%q", en.LastError.Message)
	}
	if en.Duplicate {
		b.WriteString(" (duplicate)")
	}
	fmt.Fprintf(&b, " #%d", en.Receipt.Seq)
	p.out.linef("%s", b.String())
}

func (p *textPrinter) OutboxInspection(_ string, in *outbox.Inspection) {
	p.OutboxEntry(&in.Entry)
	for _, t := range in.Transitions {
		from := "-"
		if t.From != 0 {
			from = t.From.String()
		}
		line := fmt.Sprintf("  #%d %s %s %s -> %s attempts=%d", t.Entry.Receipt.Seq, formatTime(t.At), t.Op, from, t.Entry.State, t.Entry.Attempts)
		if t.By != "" {
			line += " by=" + display([]byte(t.By))
		}
		if t.Token != 0 {
			line += fmt.Sprintf(" token=%d", t.Token)
		}
		p.out.linef("%s %s", line, t.Entry.Receipt.Hash)
	}
	if len(in.Chain) > 1 {
		p.out.linef("  chain: %s", strings.Join(in.Chain, " -> "))
	}
}

func (p *textPrinter) OutboxStats(st *outbox.Stats) {
	p.out.linef("outbox %s: %d pending, %d inflight, %d done, %d dead, %d aborted", display([]byte(st.Outbox)), st.Pending, st.Inflight, st.Done, st.Dead, st.Aborted)
	p.out.linef("oldest pending: %v overdue; oldest dead letter: %v", st.OldestPendingAge.Round(time.Millisecond), st.OldestDeadAge.Round(time.Millisecond))
	p.out.linef("leases: %d held, %d expired; durable: %v", st.InflightLeases, st.ExpiredLeases, st.Durable)
}

func (p *textPrinter) Version(v versionInfo) {
	vcs := ""
	if v.VCSRevision != "" {
		vcs = " (vcs " + v.VCSRevision
		if v.VCSTime != "" {
			vcs += " " + v.VCSTime
		}
		if v.VCSModified {
			vcs += ", modified"
		}
		vcs += ")"
	}
	p.out.linef("anchordb %s %s%s, %s", v.Module, v.Version, vcs, v.Go)
	p.out.linef("format versions (docs/FORMAT.md §11):")
	for _, f := range v.Formats {
		note := ""
		if f.Note != "" {
			note = " (" + f.Note + ")"
		}
		p.out.linef("  %-29s writes %s, reads %s%s", f.Format, f.Writes, strings.Join(f.Reads, ", "), note)
	}
}

func (p *textPrinter) Demo(r demo.Report) {
	result := "ok"
	if !r.OK {
		result = "FAILED"
	}
	if p.quiet {
		p.out.linef("demo %s: %s on %s, %.0f records/s", result, humanize.Plural(r.Records, "record"), humanize.Plural(r.Anchors, "anchor"), r.RecordsPerSec)
		return
	}
	where := r.Dir + " (removed; --keep keeps it)"
	if r.Kept {
		where = r.Dir + " (kept)"
	}
	p.out.linef("anchordb demo: %s × %s on %s, %s durability", humanize.Plural(r.Writers, "writer"), humanize.Plural(r.RecordsPerWriter, "record"), humanize.Plural(r.AnchorsRequested, "anchor"), r.Durability)
	p.out.linef("  database  %s", where)
	p.out.linef("  write     %s in %.3fs: %.0f records/s (%s answered from the index)",
		humanize.Plural(r.Written, "record"), r.WriteSeconds, r.RecordsPerSec, humanize.Plural(r.Retries, "idempotent retry", "idempotent retries"))
	p.out.linef("  stored    %s, %s, %s of up to %s, %s (index %s)",
		humanize.Plural(r.Anchors, "anchor"), humanize.Plural(r.Records, "record"), humanize.Plural(r.Segments, "segment file"), humanize.Bytes(r.SegmentSize), humanize.Bytes(r.SegmentBytes), humanize.Bytes(int64(r.IndexBytes)))
	if r.MergedRecords > 0 {
		p.out.linef("  merge     %s in merged order at %.0f records/s, root %s", humanize.Plural(r.MergedRecords, "record"), r.MergeRecordsPerSec, r.MergedRoot)
	}
	if len(r.Compactions) > 0 {
		p.out.linef("  compact   %s around a second round of %s: %s removed (%s), stubs of %s written in their place: %s",
			humanize.Plural(len(r.Compactions), "run"), humanize.Plural(r.SecondRoundRecords, "record"), humanize.Plural(r.SegmentsRemoved, "segment"), humanize.Bytes(r.RemovedBytes),
			humanize.Bytes(r.StubBytes), netText(r.NetBytes))
	}
	if r.RebuildSeconds > 0 {
		p.out.linef("  rebuild   index rebuilt from the snapshot in %.3fs", r.RebuildSeconds)
	}
	for i, c := range r.Checks {
		label := "          "
		if i == 0 {
			label = "  checks  "
		}
		status := "ok  "
		if !c.OK {
			status = "FAIL"
		}
		p.out.linef("%s%s  %-28s %s", label, status, c.Name, c.Detail)
	}
	p.out.linef("  result    %s", result)
}

// Error says err on one line on stderr, with where to find the usage
// after a usage error.
func (p *textPrinter) Error(err error) {
	var s exitStatus
	if errors.As(err, &s) {
		return
	}
	fmt.Fprintf(p.stderr, "anchordb: %s\n", errorLine(err))
	var u *usageError
	if errors.As(err, &u) {
		if u.cmd != "" {
			fmt.Fprintf(p.stderr, "run 'anchordb help %s' for usage\n", u.cmd)
		} else {
			fmt.Fprintln(p.stderr, "run 'anchordb help' for usage")
		}
	}
}

// recordLine is the human form of a record:
//
//	dev-1 #2 counter=5 2026-01-31T12:00:00.000000001Z put color=green blake3:…
func recordLine(r *engine.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d counter=%d %s %s ", display([]byte(r.Anchor)), r.Seq, r.Counter, formatTime(r.Time), display([]byte(r.Type)))
	switch {
	case r.Type == segment.TypeDelete:
		b.WriteString(display(r.Key))
	case len(r.Key) > 0:
		b.WriteString(display(r.Key) + "=" + display(r.Value))
	default:
		b.WriteString(display(r.Value))
	}
	if len(r.IdempotencyKey) > 0 {
		b.WriteString(" idempotency_key=" + display(r.IdempotencyKey))
	}
	b.WriteString(" " + r.Hash.String())
	return b.String()
}

// display renders bytes for human output: as they are when they are plain
// printable UTF-8, else Go-quoted (invalid bytes as \xff); long values are cut.
func display(b []byte) string {
	const maxShown = 64
	cut := len(b) > maxShown
	shown := b
	if cut {
		shown = b[:maxShown]
		for len(shown) > 0 && !utf8.Valid(shown) && utf8.Valid(b) {
			shown = shown[:len(shown)-1] // do not split a rune of a valid string
		}
	}
	s := string(shown)
	if len(b) == 0 || !plain(s) || !utf8.Valid(b) {
		s = strconv.Quote(s)
	}
	if cut {
		s += fmt.Sprintf("…(%d bytes)", len(b))
	}
	return s
}

func plain(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' || r == '=' || r == '\\' {
			return false
		}
	}
	return true
}

// newlineRE matches a line break with the blanks around it.
var newlineRE = regexp.MustCompile(`[ \t]*\r?\n[ \t]*`)

// errorLine is the one-line human form: "STATE_002 conflict_detected: …".
func errorLine(err error) string {
	code := codeOf(err)
	// NB: a wrapped error may print on several lines (the merkle package's
	// root mismatch does); the human form stays one line.
	msg := newlineRE.ReplaceAllString(messageOf(err), " ")
	if msg == "" {
		return string(code) + " " + code.Reason()
	}
	return string(code) + " " + code.Reason() + ": " + msg
}

// netText says what a compaction freed: removed bytes less the stubs
// written in their place, which can be more (small segments whose records
// the stubs keep).
func netText(n int64) string {
	if n < 0 {
		return humanize.Bytes(-n) + " more than before"
	}
	return humanize.Bytes(n) + " freed"
}
