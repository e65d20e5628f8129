package main

import (
	"encoding/base64"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/outbox"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/anchordb/anchordb/tool/demo"
	"github.com/anchordb/anchordb/tool/importer"
)

// jsonPrinter prints for a program: one JSON value a line on stdout, errors
// included ({"error":{…}}), in the shapes below (CONTRACT §10).
// --quiet changes none of it.
type jsonPrinter struct {
	out  *output
	text *textPrinter // for an error that cannot reach stdout
}

func (p *jsonPrinter) Receipt(r engine.Receipt) { p.out.json(r) }

func (p *jsonPrinter) Record(r *engine.Record) { p.out.json(newRecordJSON(r)) }

func (p *jsonPrinter) Found(r *engine.Record) {
	p.out.json(foundJSON{recordJSON: newRecordJSON(r), Found: true})
}

func (p *jsonPrinter) NotFound(key []byte) {
	p.out.json(notFoundJSON{Found: false, Key: byteString(key)})
}

func (p *jsonPrinter) Merged(m engine.Positioned) {
	p.out.json(mergedJSON{recordJSON: newRecordJSON(&m.Record), Pos: m.Pos})
}

func (p *jsonPrinter) MergedRoot(root segment.Hash, records uint64, f merge.Frontier) {
	p.out.json(mergedRootJSON{Root: root, Records: records, Frontier: f.Clone()})
}

func (p *jsonPrinter) Verify(rep engine.VerifyReport) { p.out.json(rep) }

func (p *jsonPrinter) Keygen(k keyPair) {
	p.out.json(keygenJSON{Name: k.name, VerifierKey: k.verifierKey, KeyFile: k.keyFile, PubFile: k.pubFile})
}

func (p *jsonPrinter) CheckpointCreated(note []byte, cp *proof.Checkpoint, file string) {
	p.out.json(checkpointCreatedJSON{Note: string(note), File: file, checkpointSummary: summarize(cp)})
}

func (p *jsonPrinter) CheckpointVerified(cp *proof.Checkpoint) {
	out := checkpointVerifiedJSON{OK: true, checkpointSummary: summarize(cp), Entries: make([]entryJSON, len(cp.Entries))}
	for i, en := range cp.Entries {
		out.Entries[i] = entryJSON{Anchor: en.Anchor, Size: en.Size, Root: en.Root}
	}
	p.out.json(out)
}

func (p *jsonPrinter) Proof(v any) { p.out.json(v) }

func (p *jsonPrinter) ProofVerified(v proofCheck) {
	out := verifiedJSON{OK: true, Kind: v.kind, Description: v.description}
	if v.checkpoint != nil {
		sum := summarize(v.checkpoint)
		out.Checkpoint = &sum
	}
	p.out.json(out)
}

func (p *jsonPrinter) Ingest(rep engine.IngestReport) {
	if rep.Anchors == nil {
		rep.Anchors = []engine.IngestedAnchor{}
	}
	p.out.json(rep)
}

func (p *jsonPrinter) Import(s importer.Summary) { p.out.json(s) }

func (p *jsonPrinter) Stats(r statsReport) {
	out := statsJSON{Stats: r.stats, Damaged: r.damaged, Recovery: newRecoveryJSON(r.recovery)}
	if out.Damaged == nil {
		out.Damaged = []damagedAnchor{}
	}
	p.out.json(out)
}

func (p *jsonPrinter) Compaction(res engine.CompactionResult) {
	if !res.Applied {
		p.out.json(res.Plan)
		return
	}
	out := compactAppliedJSON{Applied: true, Plan: res.Plan, RemovedBytes: res.RemovedBytes, StubBytes: res.StubBytes, NetBytes: res.NetBytes()}
	if res.Created != nil {
		c := snapshotInfoJSON(*res.Created)
		out.Created = &c
	}
	p.out.json(out)
}

func (p *jsonPrinter) SnapshotCreated(info snapshot.Info) { p.out.json(snapshotJSON(info)) }

func (p *jsonPrinter) SnapshotList(_ string, list []snapshot.Info, audited []bool) {
	for i, s := range list {
		if s.Err != nil {
			p.out.json(snapshotJSON(s))
			continue
		}
		p.out.json(listedSnapshotJSON{snapshotJSON(s).(snapshotInfoJSON), audited[i]})
	}
}

// NoSnapshotsToVerify prints nothing: no snapshot, no line.
func (p *jsonPrinter) NoSnapshotsToVerify(string) {}

func (p *jsonPrinter) SnapshotVerified(_ string, v engine.SnapshotVerification) {
	p.out.json(snapshotVerifyJSON{OK: true, SnapshotVerification: v})
}

func (p *jsonPrinter) SnapshotFailed(name, path string, err error) {
	body := errorJSON(err).Error
	if body.File == "" {
		body.File = path
	}
	p.out.json(snapshotFailureJSON{OK: false, Name: name, Path: path, Error: body})
}

func (p *jsonPrinter) SnapshotRetired(r engine.RetiredSnapshot) { p.out.json(r) }

func (p *jsonPrinter) Rebuild(r rebuildReport) {
	plan := r.plan
	out := rebuildJSON{Dir: plan.Dir, Anchors: plan.Anchors, Segments: plan.Segments, Stubs: plan.Stubs, Bytes: plan.Bytes,
		Applied: plan.Applied, FromSnapshot: r.fromSnapshot}
	if plan.Applied {
		rec := newRecoveryJSON(plan.Report)
		out.Seconds, out.Recovery = r.seconds, &rec
	}
	p.out.json(out)
}

func (p *jsonPrinter) OutboxEntry(en *outbox.Entry) { p.out.json(newOutboxEntryJSON(en)) }

func (p *jsonPrinter) OutboxInspection(name string, in *outbox.Inspection) {
	j := inspectJSON{Outbox: name, ID: in.Entry.ID, Entry: newOutboxEntryJSON(&in.Entry), Chain: in.Chain, Transitions: []transitionJSON{}}
	for i := range in.Transitions {
		t := &in.Transitions[i]
		tj := transitionJSON{Op: t.Op, At: formatTime(t.At), By: optString(t.By), To: t.Entry.State.String(), Entry: newOutboxEntryJSON(&t.Entry)}
		if t.Token != 0 {
			tok := t.Token
			tj.Token = &tok
		}
		if t.From != 0 {
			from := t.From.String()
			tj.From = &from
		}
		j.Transitions = append(j.Transitions, tj)
	}
	p.out.json(j)
}

func (p *jsonPrinter) OutboxStats(st *outbox.Stats) {
	p.out.json(outboxStatsJSON{Outbox: st.Outbox, Pending: st.Pending, Inflight: st.Inflight, Done: st.Done, Dead: st.Dead,
		Aborted: st.Aborted, OldestPendingAgeMS: st.OldestPendingAge.Milliseconds(), OldestDeadAgeMS: st.OldestDeadAge.Milliseconds(),
		InflightLeases: st.InflightLeases, ExpiredLeases: st.ExpiredLeases, Durable: st.Durable, Watermark: st.Watermark, Unflushed: st.Unflushed})
}

func (p *jsonPrinter) Version(v versionInfo) { p.out.json(v) }

func (p *jsonPrinter) Demo(r demo.Report) { p.out.json(r) }

// Error prints the error's JSON shape on stdout.
func (p *jsonPrinter) Error(err error) {
	var s exitStatus
	if errors.As(err, &s) {
		return
	}
	p.out.json(errorJSON(err))
	// NB: stdout may be what failed (a full disk, a stream cut midway): an
	// error that cannot reach it is said on stderr rather than lost.
	if p.out.flush() == nil {
		return
	}
	p.text.Error(err)
}

// byteString prints as a JSON string when it is valid UTF-8, else as
// {"b64":"<standard base64>"} (CONTRACT §10).
type byteString []byte

func (b byteString) MarshalJSON() ([]byte, error) {
	if utf8.Valid(b) {
		return marshal(string(b))
	}
	return marshal(b64JSON{B64: base64.StdEncoding.EncodeToString(b)})
}

type b64JSON struct {
	B64 string `json:"b64"`
}

// optBytes is b as a byteString, or nil (JSON null) when b is empty.
func optBytes(b []byte) *byteString {
	if len(b) == 0 {
		return nil
	}
	s := byteString(b)
	return &s
}

// recordJSON is the record shape of CONTRACT §10.
type recordJSON struct {
	Anchor         string       `json:"anchor"`
	Seq            uint64       `json:"seq"`
	Counter        uint64       `json:"counter"`
	Time           string       `json:"time"`
	Type           string       `json:"type"`
	Key            *byteString  `json:"key"`   // null for an event without a key
	Value          *byteString  `json:"value"` // null for a delete
	IdempotencyKey *byteString  `json:"idempotency_key"`
	PrevHash       segment.Hash `json:"prev_hash"`
	Hash           segment.Hash `json:"hash"`
}

func newRecordJSON(r *engine.Record) recordJSON {
	j := recordJSON{
		Anchor: r.Anchor, Seq: r.Seq, Counter: r.Counter, Time: formatTime(r.Time), Type: r.Type,
		Key: optBytes(r.Key), IdempotencyKey: optBytes(r.IdempotencyKey),
		PrevHash: r.PrevHash, Hash: r.Hash,
	}
	if r.Type != segment.TypeDelete {
		v := byteString(r.Value)
		if v == nil {
			v = byteString{}
		}
		j.Value = &v
	}
	return j
}

type notFoundJSON struct {
	Found bool       `json:"found"`
	Key   byteString `json:"key"`
}

type foundJSON struct {
	recordJSON
	Found bool `json:"found"`
}

// mergedJSON is the record shape of CONTRACT §10 plus the global position.
type mergedJSON struct {
	recordJSON
	Pos uint64 `json:"pos"`
}

type mergedRootJSON struct {
	Root     segment.Hash   `json:"root"`
	Records  uint64         `json:"records"`
	Frontier merge.Frontier `json:"frontier"`
}

type keygenJSON struct {
	Name        string `json:"name"`
	VerifierKey string `json:"verifier_key"`
	KeyFile     string `json:"key_file"`
	PubFile     string `json:"pub_file"`
}

type checkpointSummary struct {
	Origin  string       `json:"origin"`
	Anchors uint64       `json:"anchors"`
	Records uint64       `json:"records"`
	Root    segment.Hash `json:"root"`
	Time    string       `json:"time"`
}

func summarize(cp *proof.Checkpoint) checkpointSummary {
	return checkpointSummary{Origin: cp.Origin, Anchors: cp.Anchors, Records: cp.Records, Root: cp.Root,
		Time: checkpointTime(cp)}
}

// checkpointTime is a checkpoint's time as the CLI prints it.
func checkpointTime(cp *proof.Checkpoint) string { return cp.Time.UTC().Format(time.RFC3339Nano) }

type checkpointCreatedJSON struct {
	Note string `json:"note"`
	File string `json:"file"`
	checkpointSummary
}

type checkpointVerifiedJSON struct {
	OK bool `json:"ok"`
	checkpointSummary
	Entries []entryJSON `json:"entries"`
}

type entryJSON struct {
	Anchor string       `json:"anchor"`
	Size   uint64       `json:"size"`
	Root   segment.Hash `json:"root"`
}

type verifiedJSON struct {
	OK          bool               `json:"ok"`
	Kind        string             `json:"kind"`
	Description string             `json:"description"`
	Checkpoint  *checkpointSummary `json:"checkpoint,omitempty"`
}

type statsJSON struct {
	engine.Stats
	Damaged  []damagedAnchor `json:"damaged"`
	Recovery recoveryJSON    `json:"recovery"`
}

// recoveryJSON is engine.RecoveryReport with its errors in the CLI's error
// shape.
type recoveryJSON struct {
	Clean   bool                `json:"clean"`
	Rebuilt bool                `json:"rebuilt"`
	Events  []recoveryEventJSON `json:"events"`
}

type recoveryEventJSON struct {
	Kind    string     `json:"kind"`
	Anchor  string     `json:"anchor,omitempty"`
	File    string     `json:"file,omitempty"`
	Offset  int64      `json:"offset,omitempty"`
	Bytes   int64      `json:"bytes,omitempty"`
	Records uint64     `json:"records,omitempty"`
	Saved   string     `json:"saved,omitempty"`
	Error   *errorBody `json:"error,omitempty"`
}

func newRecoveryJSON(r engine.RecoveryReport) recoveryJSON {
	out := recoveryJSON{Clean: r.Clean, Rebuilt: r.Rebuilt, Events: []recoveryEventJSON{}}
	for _, ev := range r.Events {
		j := recoveryEventJSON{Kind: ev.Kind, Anchor: ev.Anchor, File: ev.File, Offset: ev.Offset,
			Bytes: ev.Bytes, Records: ev.Records, Saved: ev.Saved}
		if ev.Err != nil {
			b := errorJSON(ev.Err).Error
			j.Error = &b
		}
		out.Events = append(out.Events, j)
	}
	return out
}

type compactAppliedJSON struct {
	Applied      bool              `json:"applied"`
	Plan         snapshot.Plan     `json:"plan"`
	Created      *snapshotInfoJSON `json:"created"`
	RemovedBytes int64             `json:"removed_bytes"`
	StubBytes    int64             `json:"stub_bytes"`
	NetBytes     int64             `json:"net_bytes"`
}

// snapshotInfoJSON is snapshot.Info as the CLI prints it (the shape of its
// JSON tags).
type snapshotInfoJSON snapshot.Info

// unreadableSnapshotJSON is a snapshot file that cannot be read: what its
// name tells, and the error in the CLI's error shape.
type unreadableSnapshotJSON struct {
	Name    string     `json:"name"`
	Path    string     `json:"path"`
	Created *time.Time `json:"created,omitempty"`
	Error   errorBody  `json:"error"`
}

// listedSnapshotJSON is a readable snapshot as list prints it: audited says
// whether the audit log records it as the database's, with the hashes it
// claims.
type listedSnapshotJSON struct {
	snapshotInfoJSON
	Audited bool `json:"audited"`
}

// snapshotJSON is one snapshot of create or list.
func snapshotJSON(info snapshot.Info) any {
	if info.Err != nil {
		out := unreadableSnapshotJSON{Name: info.Name, Path: info.Path, Error: errorJSON(info.Err).Error}
		if !info.Created.IsZero() {
			out.Created = &info.Created
		}
		if out.Error.File == "" {
			out.Error.File = info.Path
		}
		return out
	}
	out := snapshotInfoJSON(info)
	if out.Frontier == nil {
		out.Frontier = snapshot.Frontier{}
	}
	return out
}

// snapshotVerifyJSON is one line of snapshot verify.
type snapshotVerifyJSON struct {
	OK bool `json:"ok"`
	engine.SnapshotVerification
}

// snapshotFailureJSON is a snapshot that failed to verify.
type snapshotFailureJSON struct {
	OK    bool      `json:"ok"`
	Name  string    `json:"name"`
	Path  string    `json:"path"`
	Error errorBody `json:"error"`
}

type rebuildJSON struct {
	Dir          string        `json:"dir"`
	Anchors      int           `json:"anchors"`
	Segments     int           `json:"segments"`
	Stubs        int           `json:"stubs"`
	Bytes        int64         `json:"bytes"`
	Applied      bool          `json:"applied"`
	FromSnapshot bool          `json:"from_snapshot"`
	Seconds      float64       `json:"seconds"`
	Recovery     *recoveryJSON `json:"recovery,omitempty"` // set with --apply
}

// outboxEntryJSON is an entry as the CLI prints it (CONTRACT §12).
type outboxEntryJSON struct {
	Outbox        string            `json:"outbox"`
	ID            string            `json:"id"`
	State         string            `json:"state"`
	Attempts      int               `json:"attempts"`
	NextAttemptAt string            `json:"next_attempt_at"`
	Fingerprint   segment.Hash      `json:"fingerprint"`
	Lease         *outboxLeaseJSON  `json:"lease"`
	LastError     *outboxErrJSON    `json:"last_error"`
	SupersededBy  *string           `json:"superseded_by"`
	Supersedes    *string           `json:"supersedes"`
	Duplicate     bool              `json:"duplicate"`
	EnqueuedAt    string            `json:"enqueued_at"`
	EnqueueSeq    uint64            `json:"enqueue_seq"`
	Payload       *byteString       `json:"payload"`
	PayloadSize   int               `json:"payload_size"`
	Destination   *string           `json:"destination"`
	Headers       map[string]string `json:"headers"`
	Result        *byteString       `json:"result"`
	DoneAt        *string           `json:"done_at"`
	DeadAt        *string           `json:"dead_at"`
	AbortedAt     *string           `json:"aborted_at"`
	AbortedBy     *string           `json:"aborted_by"`
	Receipt       outboxReceiptJSON `json:"receipt"`
}

type outboxLeaseJSON struct {
	Worker    string `json:"worker"`
	Token     uint64 `json:"token"`
	ClaimedAt string `json:"claimed_at"`
	ExpiresAt string `json:"expires_at"`
}

type outboxErrJSON struct {
	Message   string `json:"message"`
	Permanent bool   `json:"permanent"`
	At        string `json:"at"`
	Attempt   int    `json:"attempt"`
	PolicyRef string `json:"policy_ref"`
}

type outboxReceiptJSON struct {
	Anchor  string       `json:"anchor"`
	Seq     uint64       `json:"seq"`
	Counter uint64       `json:"counter"`
	Hash    segment.Hash `json:"hash"`
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatTime(t)
	return &s
}

func newOutboxEntryJSON(en *outbox.Entry) *outboxEntryJSON {
	j := &outboxEntryJSON{Outbox: en.Outbox, ID: en.ID, State: en.State.String(), Attempts: en.Attempts,
		NextAttemptAt: formatTime(en.NextAttemptAt), Fingerprint: en.Fingerprint,
		SupersededBy: optString(en.SupersededBy), Supersedes: optString(en.Supersedes), Duplicate: en.Duplicate,
		EnqueuedAt: formatTime(en.EnqueuedAt), EnqueueSeq: en.EnqueueSeq, PayloadSize: en.PayloadSize,
		Destination: optString(en.Destination), Headers: en.Headers, DoneAt: optTime(en.DoneAt),
		DeadAt: optTime(en.DeadAt), AbortedAt: optTime(en.AbortedAt), AbortedBy: optString(en.AbortedBy),
		Receipt: outboxReceiptJSON{Anchor: en.Receipt.Anchor, Seq: en.Receipt.Seq, Counter: en.Receipt.Counter, Hash: en.Receipt.Hash}}
	if en.Payload != nil {
		p := byteString(en.Payload)
		j.Payload = &p
	}
	if en.Result != nil {
		r := byteString(en.Result)
		j.Result = &r
	}
	if l := en.Lease; l != nil {
		j.Lease = &outboxLeaseJSON{Worker: l.Worker, Token: l.Token, ClaimedAt: formatTime(l.ClaimedAt), ExpiresAt: formatTime(l.ExpiresAt)}
	}
	if f := en.LastError; f != nil {
		j.LastError = &outboxErrJSON{Message: f.Message, Permanent: f.Permanent, At: formatTime(f.At), Attempt: f.Attempt, PolicyRef: f.PolicyRef}
	}
	return j
}

type inspectJSON struct {
	Outbox      string           `json:"outbox"`
	ID          string           `json:"id"`
	Entry       *outboxEntryJSON `json:"entry"`
	Transitions []transitionJSON `json:"transitions"`
	Chain       []string         `json:"chain"`
}

type transitionJSON struct {
	Op    string           `json:"op"`
	At    string           `json:"at"`
	By    *string          `json:"by"`
	Token *uint64          `json:"token"`
	From  *string          `json:"from"`
	To    string           `json:"to"`
	Entry *outboxEntryJSON `json:"entry"`
}

type outboxStatsJSON struct {
	Outbox             string `json:"outbox"`
	Pending            int64  `json:"pending"`
	Inflight           int64  `json:"inflight"`
	Done               int64  `json:"done"`
	Dead               int64  `json:"dead"`
	Aborted            int64  `json:"aborted"`
	OldestPendingAgeMS int64  `json:"oldest_pending_age_ms"`
	OldestDeadAgeMS    int64  `json:"oldest_dead_age_ms"`
	InflightLeases     int64  `json:"inflight_leases"`
	ExpiredLeases      int64  `json:"expired_leases"`
	Durable            bool   `json:"durable"`
	Watermark          uint64 `json:"watermark"`
	Unflushed          int    `json:"unflushed"`
}

// errorBody is the JSON error shape of CONTRACT §10 with the optional details an
// error carries: its location, an idempotency conflict's original receipt
// and fingerprints, a refusal's retry hint, an import's line.
type errorBody struct {
	Code    string `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`

	Anchor string `json:"anchor,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	File   string `json:"file,omitempty"`
	Offset int64  `json:"offset,omitempty"`

	Original             *engine.Receipt `json:"original,omitempty"`
	ExistingFingerprint  string          `json:"existing_fingerprint,omitempty"`
	RequestedFingerprint string          `json:"requested_fingerprint,omitempty"`

	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// A refusal's capacity state.
	InFlightRecords *int   `json:"in_flight_records,omitempty"`
	InFlightBytes   *int64 `json:"in_flight_bytes,omitempty"`
	MaxRecords      int    `json:"max_in_flight_records,omitempty"`
	MaxBytes        int64  `json:"max_in_flight_bytes,omitempty"`

	Line       int  `json:"line,omitempty"`
	Imported   *int `json:"imported,omitempty"`
	Duplicates *int `json:"duplicates,omitempty"`
	// Appended: the records an interrupted or failed ingest joined.
	Appended *uint64 `json:"appended,omitempty"`

	// An ingest refused for a fork: both heads of the anchor.
	Ours   *headJSON `json:"ours,omitempty"`
	Theirs *headJSON `json:"theirs,omitempty"`

	// An outbox's refusal: the entry's state, and the entry.
	State string           `json:"state,omitempty"`
	Entry *outboxEntryJSON `json:"entry,omitempty"`
}

// headJSON is an anchor's head: its last seq and that record's hash.
type headJSON struct {
	Seq  uint64       `json:"seq"`
	Hash segment.Hash `json:"hash"`
}

type errorJSONShape struct {
	Error errorBody `json:"error"`
}

func errorJSON(err error) errorJSONShape {
	code := codeOf(err)
	b := errorBody{Code: string(code), Reason: code.Reason(), Message: messageOf(err)}
	var e *errs.Error
	if errors.As(err, &e) {
		b.Anchor, b.Seq, b.File, b.Offset = e.Anchor, e.Seq, e.File, e.Offset
	}
	var ce *engine.ConflictError
	if errors.As(err, &ce) {
		orig := ce.Original
		b.Original = &orig
		b.ExistingFingerprint, b.RequestedFingerprint = ce.Existing, ce.Requested
	}
	var re *errs.RefusalError
	if errors.As(err, &re) {
		b.RetryAfterMS = ceilMillis(re.RetryAfter)
		if re.Anchor != "" {
			b.Anchor = re.Anchor
		}
		if re.MaxRecords > 0 {
			recs, bytes := re.InFlightRecords, re.InFlightBytes
			b.InFlightRecords, b.InFlightBytes = &recs, &bytes
			b.MaxRecords, b.MaxBytes = re.MaxRecords, re.MaxBytes
		}
	}
	var fe *engine.ForkError
	if errors.As(err, &fe) {
		b.Ours = &headJSON{Seq: fe.OurHead.Seq, Hash: fe.OurHead.Hash}
		b.Theirs = &headJSON{Seq: fe.TheirSeq, Hash: fe.TheirHd}
	}
	var le *importer.LineError
	if errors.As(err, &le) {
		b.Line = le.Line
		imported, dups := le.Imported, le.Duplicates
		b.Imported, b.Duplicates = &imported, &dups
	}
	var ge *ingestError
	if errors.As(err, &ge) {
		appended := ge.appended
		b.Appended = &appended
	}
	var se *outbox.StateError
	if errors.As(err, &se) {
		b.State = se.State().String()
		b.Entry = newOutboxEntryJSON(&se.Entry)
		if se.Existing != "" {
			b.ExistingFingerprint, b.RequestedFingerprint = se.Existing, se.Requested
		}
	}
	return errorJSONShape{Error: b}
}

// ceilMillis is d in whole milliseconds, rounded up: a retry hint printed
// short is one that is not enough, and one under a millisecond would print
// as 0 and (omitempty) not at all.
func ceilMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}
