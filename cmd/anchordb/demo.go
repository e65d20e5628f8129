package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
	"github.com/spf13/pflag"
)

var demoCmd = &command{
	name:    "demo",
	summary: "run the main job on a fresh database: concurrent writers, verify, merge, checkpoint, snapshot, compact, rebuild; print a report",
	detail: `Creates a fresh database (in a temporary directory unless --dir is given; an explicit
--dir must be empty or absent) with small segments (--segment-size, default sized so
that every anchor seals several), starts --writers goroutines that each append --records
records (puts, deletes, events, some with idempotency keys that are retried) to anchors
chosen at random among --anchors, all with sync durability, then checks, in order:

  chains, receipts, merged reads
                seqs dense, prev_hash links from the genesis hash, hashes recompute,
                counters increase; every acknowledged receipt is in its log; counters
                unique, Get and Scan agree with the last write in merged order
  close, reopen the database closes cleanly and reopens without recovery; the same
                checks again after the reopen
  verify        the engine's full verify finds nothing
  merge         the merged stream at the current frontier holds every record once,
                positions 1…N, strictly ordered by (counter, anchor id bytes), and its
                records hash to the merged root
  checkpoint    a checkpoint signed with a fresh key (kept in the database directory as
                demo-checkpoint.key/.pub) opens with the verifier key, covers every
                record, and does not open with another key
  inclusion proof
                a record's inclusion proof at the checkpoint's size verifies offline,
                against the checkpoint's root, and fails with a changed leaf
  snapshot      a snapshot of the state verifies by replay, and its state hash is the
                hash of the state the acknowledged writes imply
  compact       a truncating policy (keep 1 snapshot, raw_log truncate) is applied,
                a second round of writes, then two more compactions: sealed segments
                below the kept snapshot are removed; the state, verify, the audit log
                and the kept snapshots are checked afterwards
  rebuild       the database is closed and its index rebuilt from the snapshot
                (rebuild-index --apply --from-snapshot); heads, merged root and state
                are as before; then reopen, verify and idempotent retries again

Prints a short report (with --json one object: {"ok",…,"records_per_sec",…,
"merged_records","removed_bytes","rebuild_seconds",…,"checks":[{"name","ok","detail"}]}).
Exit 1 if a check fails.`,
	minArgs: 0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) runFunc {
		var cfg demoConfig
		fs.IntVar(&cfg.writers, "writers", 8, "concurrent writers")
		fs.IntVar(&cfg.anchors, "anchors", 64, "anchors the writers append to")
		fs.IntVar(&cfg.records, "records", 500, "records each writer appends")
		fs.BoolVar(&cfg.keep, "keep", false, "keep the temporary database directory")
		fs.Int64Var(&cfg.segmentSize, "segment-size", 0, "segment size in bytes (at least 1024; default: sized so every anchor seals several segments)")
		return func(e *env, _ []string) error {
			if e.g.readOnly {
				return usagef("demo", "demo writes a database of its own: --read-only does not apply")
			}
			return runDemo(e, cfg)
		}
	},
}

type demoConfig struct {
	writers, anchors, records int
	keep                      bool
	segmentSize               int64
}

// demoRecordBytes is about the size of one demo record's frame, to size the
// segments.
const demoRecordBytes = 140

// demoKeys is the size of the key space the writers share, so that keys are
// overwritten across anchors and the merged order decides reads.
const demoKeys = 128

type demoReport struct {
	OK               bool    `json:"ok"`
	Dir              string  `json:"dir"`
	Kept             bool    `json:"kept"`
	Durability       string  `json:"durability"`
	Writers          int     `json:"writers"`
	AnchorsRequested int     `json:"anchors_requested"`
	RecordsPerWriter int     `json:"records_per_writer"`
	Anchors          uint64  `json:"anchors"`
	Records          uint64  `json:"records"`
	Written          int     `json:"written"`
	Retries          int     `json:"idempotent_retries"`
	WriteSeconds     float64 `json:"write_seconds"`
	RecordsPerSec    float64 `json:"records_per_sec"`
	Segments         uint64  `json:"segments"`
	SegmentBytes     int64   `json:"segment_bytes"`
	IndexBytes       uint64  `json:"index_bytes"`
	SegmentSize      int64   `json:"segment_size"`

	MergedRecords      uint64           `json:"merged_records"`
	MergedRoot         segment.Hash     `json:"merged_root"`
	MergeRecordsPerSec float64          `json:"merge_records_per_sec"`
	KeyFile            string           `json:"key_file,omitempty"`
	Snapshot           string           `json:"snapshot,omitempty"`
	Policy             string           `json:"policy,omitempty"`
	SecondRoundRecords int              `json:"second_round_records"`
	Compactions        []demoCompaction `json:"compactions"`
	SegmentsRemoved    int              `json:"segments_removed"`
	RemovedBytes       int64            `json:"removed_bytes"` // segment bytes removed
	StubBytes          int64            `json:"stub_bytes"`    // stub bytes written in their place
	NetBytes           int64            `json:"net_bytes"`     // what the compactions freed: removed less stubs
	RebuildSeconds     float64          `json:"rebuild_seconds"`

	Checks []demoCheck `json:"checks"`
}

// demoCompaction is one applied compaction of the demo.
type demoCompaction struct {
	Actions         int    `json:"actions"`
	Created         string `json:"created,omitempty"`
	SnapshotsDelete int    `json:"snapshots_deleted"`
	SegmentsRemoved int    `json:"segments_removed"`
	RemovedBytes    int64  `json:"removed_bytes"`
	StubBytes       int64  `json:"stub_bytes"`
}

type demoCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// demoWrite is one acknowledged append of the write phase.
type demoWrite struct {
	entry   engine.Entry
	receipt engine.Receipt
}

type demo struct {
	e      *env
	cfg    demoConfig
	dir    string
	db     *engine.DB
	writes []demoWrite
	report demoReport
	skey   string // the checkpoint phase's signer key: compaction cuts only inside a signed checkpoint
	phases *phaseProgress
}

func runDemo(e *env, cfg demoConfig) error {
	switch {
	case cfg.writers < 1 || cfg.writers > 10_000:
		return usagef("demo", "--writers must be 1..10000")
	case cfg.anchors < 1 || cfg.anchors > 1_000_000:
		return usagef("demo", "--anchors must be 1..1000000")
	case cfg.records < 1 || cfg.records > 10_000_000:
		return usagef("demo", "--records must be 1..10000000")
	case int64(cfg.writers)*int64(cfg.records) > 50_000_000:
		return usagef("demo", "--writers × --records must be at most 50,000,000")
	case cfg.segmentSize != 0 && (cfg.segmentSize < 1<<10 || cfg.segmentSize > 1<<30):
		return usagef("demo", "--segment-size must be 1024..%d", 1<<30)
	}
	if cfg.segmentSize == 0 {
		// About four segments per anchor for the first round of writes.
		perAnchor := int64(cfg.writers) * int64(cfg.records) / int64(cfg.anchors) * demoRecordBytes
		cfg.segmentSize = min(max(perAnchor/4, 1<<10), 64<<20)
	}
	d := &demo{e: e, cfg: cfg, phases: newPhaseProgress(e.newProgress())}
	defer d.phases.close()
	temp := !e.g.dirSet
	if temp {
		dir, err := os.MkdirTemp("", "anchordb-demo-")
		if err != nil {
			return errs.Wrap(errs.CodeWriteFailed, err, "create a temporary directory")
		}
		d.dir = dir
		if !cfg.keep {
			defer os.RemoveAll(dir)
		}
	} else {
		d.dir = e.g.dir
		if names, err := os.ReadDir(d.dir); err == nil && len(names) > 0 {
			return errs.New(errs.CodeInvalidInput, "demo needs a fresh database: %s is not empty", d.dir)
		}
	}
	defer func() {
		if d.db != nil {
			_ = d.db.Close()
		}
	}()
	d.report = demoReport{Dir: d.dir, Kept: !temp || cfg.keep, Writers: cfg.writers,
		AnchorsRequested: cfg.anchors, RecordsPerWriter: cfg.records, SegmentSize: cfg.segmentSize,
		Compactions: []demoCompaction{}}

	if err := d.open(); err != nil {
		return err
	}
	d.report.Durability = d.db.Options().DurabilityMode()
	writes, elapsed, err := d.write(1, cfg.records)
	if err != nil {
		return err
	}
	d.writes = writes
	d.report.Written = len(writes)
	d.report.Retries = countRetries(writes)
	d.report.WriteSeconds = elapsed.Seconds()
	if elapsed > 0 {
		d.report.RecordsPerSec = float64(len(writes)) / elapsed.Seconds()
	}
	st, err := d.db.Stats(e.ctx)
	if err != nil {
		return err
	}
	d.report.Anchors, d.report.Records = st.Anchors, st.Records
	d.report.Segments, d.report.SegmentBytes, d.report.IndexBytes = st.SegmentFiles, st.SegmentBytes, st.IndexBytes

	if err := d.checkAll(""); err != nil {
		return err
	}
	closeErr := d.db.Close()
	d.db = nil
	d.add("close", closeErr == nil, errDetail(closeErr, "closed cleanly"))
	// The index's size once Close flushed it: its rows live in memtables
	// until a flush, so a running database's files say little (4.6 KiB
	// for 200,000 records).
	if n, err := dirBytes(filepath.Join(d.dir, engine.IndexDir)); err == nil {
		d.report.IndexBytes = uint64(n)
	}
	if closeErr == nil {
		if err := d.open(); err != nil {
			return err
		}
		rep := d.db.RecoveryReport()
		d.add("reopen", rep.Clean && len(rep.Events) == 0,
			fmt.Sprintf("clean=%v, %d recovery events", rep.Clean, len(rep.Events)))
		if err := d.checkAll(" after reopen"); err != nil {
			return err
		}
		d.laterPhases()
	}

	d.report.OK = true
	for _, c := range d.report.Checks {
		d.report.OK = d.report.OK && c.OK
	}
	d.print()
	if !d.report.OK {
		return exitStatus(exitFinding)
	}
	return nil
}

// options are the engine options of the demo database.
func (d *demo) options() engine.Options {
	return engine.Options{Logger: stderrLogger{w: d.e.stderr, quiet: d.e.g.quiet}, SegmentSize: d.cfg.segmentSize}
}

func (d *demo) open() error {
	db, err := engine.Open(d.dir, d.options())
	if err != nil {
		return err
	}
	d.db = db
	return nil
}

func (d *demo) add(name string, ok bool, detail string) {
	d.report.Checks = append(d.report.Checks, demoCheck{Name: name, OK: ok, Detail: detail})
}

func errDetail(err error, okDetail string) string {
	if err != nil {
		return err.Error()
	}
	return okDetail
}

func demoAnchor(i int) string { return fmt.Sprintf("demo/device-%04d", i) }

// write runs a write phase: cfg.writers goroutines appending n records each
// through the engine with its default (sync) durability. It returns the
// acknowledged appends (not the idempotent retries) and the time it took.
func (d *demo) write(round, n int) ([]demoWrite, time.Duration, error) {
	cfg := d.cfg
	perWriter := make([][]demoWrite, cfg.writers)
	errc := make(chan error, cfg.writers)
	var done atomic.Int64
	var wg sync.WaitGroup

	stopProgress, progressDone := make(chan struct{}), make(chan struct{})
	prog := d.e.newProgress()
	total := int64(cfg.writers) * int64(n)
	go func() {
		defer close(progressDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				prog.update("demo: round %d: %d/%s written", round, done.Load(), plural(total, "record"))
			}
		}
	}()

	start := time.Now()
	for w := range cfg.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, 0x616e63686f726462+uint64(round)))
			out := make([]demoWrite, 0, n)
			for i := range n {
				ent := demoEntry(rng, cfg, round, w, i)
				r, err := d.db.Append(d.e.ctx, ent)
				if err != nil {
					errc <- fmt.Errorf("writer %d, record %d: %w", w, i, err)
					return
				}
				out = append(out, demoWrite{entry: ent, receipt: r})
				if len(ent.IdempotencyKey) > 0 {
					// A retry of the same request returns the original receipt.
					again, err := d.db.Append(d.e.ctx, ent)
					if err != nil {
						errc <- fmt.Errorf("writer %d, retry of record %d: %w", w, i, err)
						return
					}
					if !again.Duplicate || again.Seq != r.Seq || again.Hash != r.Hash || again.Counter != r.Counter {
						errc <- errs.New(errs.CodeConflict, "writer %d: the retry of %s #%d returned %+v", w, r.Anchor, r.Seq, again)
						return
					}
				}
				done.Add(1)
			}
			perWriter[w] = out
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	<-progressDone
	prog.done()
	close(errc)
	if err := <-errc; err != nil {
		return nil, elapsed, err
	}
	var writes []demoWrite
	for _, ws := range perWriter {
		writes = append(writes, ws...)
	}
	return writes, elapsed, nil
}

// countRetries counts the appends that were retried with their idempotency
// key (each retry was checked to return the original receipt).
func countRetries(ws []demoWrite) int {
	n := 0
	for _, w := range ws {
		if len(w.entry.IdempotencyKey) > 0 {
			n++
		}
	}
	return n
}

// demoEntry is record i of writer w in a round: mostly puts over a shared key
// space, some deletes, some events without a key; every 25th carries an
// idempotency key.
func demoEntry(rng *rand.Rand, cfg demoConfig, round, w, i int) engine.Entry {
	ent := engine.Entry{Anchor: demoAnchor(rng.IntN(cfg.anchors))}
	key := []byte(fmt.Sprintf("key-%03d", rng.IntN(demoKeys)))
	switch r := rng.IntN(100); {
	case r < 5:
		ent.Type, ent.Key = segment.TypePut, key
		ent.Value = []byte{0xff, 0x00, byte(w), byte(i), byte(i >> 8)} // not UTF-8
	case r < 65:
		ent.Type, ent.Key = segment.TypePut, key
		ent.Value = []byte(fmt.Sprintf("writer %d record %d", w, i))
	case r < 80:
		ent.Type, ent.Key = segment.TypeDelete, key
	default:
		ent.Type = "TELEMETRY_UPDATE"
		ent.Value = []byte(fmt.Sprintf(`{"writer":%d,"record":%d,"cpu":%d.%d}`, w, i, rng.IntN(100), rng.IntN(10)))
	}
	if i%25 == 0 {
		ent.IdempotencyKey = []byte(fmt.Sprintf("round-%d/writer-%d/op-%d", round, w, i))
	}
	return ent
}

// checkAll reads everything back and adds the receipts, chains and merged
// reads checks. It returns an error only when reading fails outright.
func (d *demo) checkAll(suffix string) error {
	defer d.phases.step("reading back every record" + suffix)()
	ctx := d.e.ctx
	logs := make(map[string][]engine.Record)
	var all []engine.Record
	var chainProblems []string
	heads := 0
	for info, err := range d.db.Anchors(ctx) {
		if err != nil {
			return err
		}
		heads++
		var recs []engine.Record
		prev := segment.GenesisHash(info.ID)
		var lastCounter uint64
		for rec, err := range d.db.Log(ctx, info.ID, 1, 0) {
			if err != nil {
				chainProblems = append(chainProblems, err.Error())
				break
			}
			want := uint64(len(recs) + 1)
			switch {
			case rec.Seq != want:
				chainProblems = append(chainProblems, fmt.Sprintf("%s: seq %d where %d was due", info.ID, rec.Seq, want))
			case rec.PrevHash != prev:
				chainProblems = append(chainProblems, fmt.Sprintf("%s #%d: prev_hash does not link", info.ID, rec.Seq))
			case rec.ComputeHash() != rec.Hash:
				chainProblems = append(chainProblems, fmt.Sprintf("%s #%d: hash does not recompute", info.ID, rec.Seq))
			case rec.Counter <= lastCounter:
				chainProblems = append(chainProblems, fmt.Sprintf("%s #%d: counter %d not above %d", info.ID, rec.Seq, rec.Counter, lastCounter))
			}
			prev, lastCounter = rec.Hash, rec.Counter
			recs = append(recs, rec)
		}
		if uint64(len(recs)) != info.Records || (len(recs) > 0 && recs[len(recs)-1].Hash != info.HeadHash) {
			chainProblems = append(chainProblems, fmt.Sprintf("%s: head is #%d %s, the log has %s", info.ID, info.Records, info.HeadHash, plural(len(recs), "record")))
		}
		logs[info.ID] = recs
		all = append(all, recs...)
	}
	appended := 0
	for _, w := range d.writes {
		if !w.receipt.Duplicate {
			appended++
		}
	}
	if len(all) != appended {
		chainProblems = append(chainProblems, fmt.Sprintf("the logs hold %s, %d were acknowledged", plural(len(all), "record"), appended))
	}
	d.add("chains"+suffix, len(chainProblems) == 0, problems(chainProblems,
		fmt.Sprintf("%s, %s: seqs dense, prev_hash links, hashes recompute, counters increase", plural(heads, "anchor"), plural(len(all), "record"))))

	var receiptProblems []string
	for _, w := range d.writes {
		r := w.receipt
		recs := logs[r.Anchor]
		if r.Seq == 0 || r.Seq > uint64(len(recs)) {
			receiptProblems = append(receiptProblems, fmt.Sprintf("%s #%d: acknowledged but not in the log", r.Anchor, r.Seq))
			continue
		}
		rec := recs[r.Seq-1]
		ent := w.entry
		if rec.Hash != r.Hash || rec.Counter != r.Counter || rec.Type != ent.Type || !bytes.Equal(rec.Key, ent.Key) ||
			!bytes.Equal(rec.Value, ent.Value) || !bytes.Equal(rec.IdempotencyKey, ent.IdempotencyKey) {
			receiptProblems = append(receiptProblems, fmt.Sprintf("%s #%d: the record differs from what was acknowledged", r.Anchor, r.Seq))
		}
	}
	d.add("receipts"+suffix, len(receiptProblems) == 0, problems(receiptProblems,
		fmt.Sprintf("%s, each matching its record", plural(len(d.writes), "receipt"))))

	var readProblems []string
	slices.SortFunc(all, compareMerged)
	for i := 1; i < len(all); i++ {
		if all[i].Counter == all[i-1].Counter {
			readProblems = append(readProblems, fmt.Sprintf("counter %d is shared by %s #%d and %s #%d", all[i].Counter, all[i-1].Anchor, all[i-1].Seq, all[i].Anchor, all[i].Seq))
		}
	}
	last := make(map[string]engine.Record)
	for _, rec := range all {
		if !rec.IsEvent() {
			last[string(rec.Key)] = rec
		}
	}
	live := 0
	for key, want := range last {
		v, err := d.db.Get(ctx, []byte(key))
		switch {
		case want.Type == segment.TypeDelete:
			if !errors.Is(err, engine.ErrNotFound) {
				readProblems = append(readProblems, fmt.Sprintf("get %q: want not found (deleted by %s #%d), got %v", key, want.Anchor, want.Seq, err))
			}
		case err != nil:
			readProblems = append(readProblems, fmt.Sprintf("get %q: %v", key, err))
		default:
			live++
			if v.Anchor != want.Anchor || v.Seq != want.Seq || !bytes.Equal(v.Value, want.Value) {
				readProblems = append(readProblems, fmt.Sprintf("get %q: got %s #%d, the merged order ends with %s #%d", key, v.Anchor, v.Seq, want.Anchor, want.Seq))
			}
		}
	}
	scanned := 0
	for v, err := range d.db.Scan(ctx, nil) {
		if err != nil {
			return err
		}
		scanned++
		want, ok := last[string(v.Key)]
		if !ok || want.Type != segment.TypePut || v.Anchor != want.Anchor || v.Seq != want.Seq {
			readProblems = append(readProblems, fmt.Sprintf("scan: key %q at %s #%d is not the merged order's last put", v.Key, v.Anchor, v.Seq))
		}
	}
	if scanned != live {
		readProblems = append(readProblems, fmt.Sprintf("scan found %d live keys, get %d", scanned, live))
	}
	d.add("merged reads"+suffix, len(readProblems) == 0, problems(readProblems,
		fmt.Sprintf("%s (%d live): get and scan follow the merged order; counters unique", plural(len(last), "key"), live)))
	return nil
}

// problems is the detail of a check: the first few problems, or okDetail.
func problems(ps []string, okDetail string) string {
	switch {
	case len(ps) == 0:
		return okDetail
	case len(ps) <= 3:
		return fmt.Sprint(ps)
	default:
		return fmt.Sprintf("%v and %d more", ps[:3], len(ps)-3)
	}
}

func (d *demo) print() {
	r := d.report
	e := d.e
	if e.g.json {
		e.out.json(r)
		return
	}
	result := "ok"
	if !r.OK {
		result = "FAILED"
	}
	if e.g.quiet {
		e.out.linef("demo %s: %s on %s, %.0f records/s", result, plural(r.Records, "record"), plural(r.Anchors, "anchor"), r.RecordsPerSec)
		return
	}
	where := r.Dir + " (removed; --keep keeps it)"
	if r.Kept {
		where = r.Dir + " (kept)"
	}
	e.out.linef("anchordb demo: %s × %s on %s, %s durability", plural(r.Writers, "writer"), plural(r.RecordsPerWriter, "record"), plural(r.AnchorsRequested, "anchor"), r.Durability)
	e.out.linef("  database  %s", where)
	e.out.linef("  write     %s in %.3fs: %.0f records/s (%s answered from the index)",
		plural(r.Written, "record"), r.WriteSeconds, r.RecordsPerSec, plural(r.Retries, "idempotent retry", "idempotent retries"))
	e.out.linef("  stored    %s, %s, %s of up to %s, %s (index %s)",
		plural(r.Anchors, "anchor"), plural(r.Records, "record"), plural(r.Segments, "segment file"), humanBytes(r.SegmentSize), humanBytes(r.SegmentBytes), humanBytes(int64(r.IndexBytes)))
	if r.MergedRecords > 0 {
		e.out.linef("  merge     %s in merged order at %.0f records/s, root %s", plural(r.MergedRecords, "record"), r.MergeRecordsPerSec, r.MergedRoot)
	}
	if len(r.Compactions) > 0 {
		e.out.linef("  compact   %s around a second round of %s: %s removed (%s), stubs of %s written in their place: %s",
			plural(len(r.Compactions), "run"), plural(r.SecondRoundRecords, "record"), plural(r.SegmentsRemoved, "segment"), humanBytes(r.RemovedBytes),
			humanBytes(r.StubBytes), netText(r.NetBytes))
	}
	if r.RebuildSeconds > 0 {
		e.out.linef("  rebuild   index rebuilt from the snapshot in %.3fs", r.RebuildSeconds)
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
		e.out.linef("%s%s  %-28s %s", label, status, c.Name, c.Detail)
	}
	e.out.linef("  result    %s", result)
}

// compareMerged orders records by the merged order: (counter, anchor id
// bytes).
func compareMerged(a, b engine.Record) int {
	return merge.CompareKeys(a.Counter, a.Anchor, b.Counter, b.Anchor)
}
