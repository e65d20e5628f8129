// Package demo is `anchordb demo` as a library: the main job of the
// engine run on a fresh database, with every result checked.
//
// Run creates a database (in a temporary directory unless Config.Dir is
// given) with small segments, starts Config.Writers goroutines that each
// append Config.Records records — puts, deletes, events, some with
// idempotency keys that are retried — to anchors chosen at random, all
// durable, and then checks, in order: the chains, receipts and merged
// reads; a clean close and reopen, and the same checks again; verify;
// the merged stream and its root; a signed checkpoint; an inclusion proof
// against it; a snapshot proved by replay; a truncating compaction around
// a second round of writes; and a rebuild of the index from the snapshot
// (phases.go). Each check is one line of the Report; an engine error fails
// the check it belongs to, and the demo goes on with what still makes
// sense. The command line's `anchordb demo --help` says the same for a
// user.
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
)

// Limits of a Config.
const (
	MaxWriters     = 10_000
	MaxAnchors     = 1_000_000
	MaxRecords     = 10_000_000
	MaxWrites      = 50_000_000 // Writers × Records
	MinSegmentSize = 1 << 10
	MaxSegmentSize = 1 << 30
)

// Config says what the demo runs.
type Config struct {
	// Writers is the number of concurrent writers, 1..MaxWriters.
	Writers int
	// Anchors is the number of anchors they append to, 1..MaxAnchors.
	Anchors int
	// Records is the number of records each writer appends,
	// 1..MaxRecords; Writers × Records is at most MaxWrites.
	Records int
	// SegmentSize is the segment size in bytes, MinSegmentSize..
	// MaxSegmentSize; 0 sizes segments so that every anchor seals several.
	SegmentSize int64
	// Dir is the database directory, which must be empty or absent; ""
	// is a temporary directory, removed when Run returns unless Keep.
	Dir  string
	Keep bool
	// Logger receives the engine's recovery reports and background
	// errors (engine.Options.Logger); nil: none.
	Logger engine.Logger
	// Progress, if set, is where the demo draws what it is doing.
	Progress Progress
}

// Validate reports a Config out of its limits as INPUT_001.
func (c Config) Validate() error {
	switch {
	case c.Writers < 1 || c.Writers > MaxWriters:
		return errs.New(errs.CodeInvalidInput, "demo: %d writers: want 1..%d", c.Writers, MaxWriters)
	case c.Anchors < 1 || c.Anchors > MaxAnchors:
		return errs.New(errs.CodeInvalidInput, "demo: %d anchors: want 1..%d", c.Anchors, MaxAnchors)
	case c.Records < 1 || c.Records > MaxRecords:
		return errs.New(errs.CodeInvalidInput, "demo: %d records a writer: want 1..%d", c.Records, MaxRecords)
	case int64(c.Writers)*int64(c.Records) > MaxWrites:
		return errs.New(errs.CodeInvalidInput, "demo: %d writers × %d records: want at most %d", c.Writers, c.Records, MaxWrites)
	case c.SegmentSize != 0 && (c.SegmentSize < MinSegmentSize || c.SegmentSize > MaxSegmentSize):
		return errs.New(errs.CodeInvalidInput, "demo: segment size %d: want %d..%d", c.SegmentSize, MinSegmentSize, MaxSegmentSize)
	}
	return nil
}

// recordBytes is about the size of one demo record's frame, to size the
// segments.
const recordBytes = 140

// keySpace is the size of the key space the writers share, so that keys are
// overwritten across anchors and the merged order decides reads.
const keySpace = 128

// Report is what the demo did and found; its JSON is `anchordb demo
// --json`'s.
type Report struct {
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

	MergedRecords      uint64       `json:"merged_records"`
	MergedRoot         segment.Hash `json:"merged_root"`
	MergeRecordsPerSec float64      `json:"merge_records_per_sec"`
	KeyFile            string       `json:"key_file,omitempty"`
	Snapshot           string       `json:"snapshot,omitempty"`
	Policy             string       `json:"policy,omitempty"`
	SecondRoundRecords int          `json:"second_round_records"`
	Compactions        []Compaction `json:"compactions"`
	SegmentsRemoved    int          `json:"segments_removed"`
	RemovedBytes       int64        `json:"removed_bytes"` // segment bytes removed
	StubBytes          int64        `json:"stub_bytes"`    // stub bytes written in their place
	NetBytes           int64        `json:"net_bytes"`     // what the compactions freed: removed less stubs
	RebuildSeconds     float64      `json:"rebuild_seconds"`

	Checks []Check `json:"checks"`
}

// Compaction is one applied compaction of the demo.
type Compaction struct {
	Actions         int    `json:"actions"`
	Created         string `json:"created,omitempty"`
	SnapshotsDelete int    `json:"snapshots_deleted"`
	SegmentsRemoved int    `json:"segments_removed"`
	RemovedBytes    int64  `json:"removed_bytes"`
	StubBytes       int64  `json:"stub_bytes"`
}

// Check is one check of the demo and its outcome; Detail says what was
// checked, or the first problems found.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// ack is one acknowledged append of the write phase.
type ack struct {
	entry   engine.Entry
	receipt engine.Receipt
}

type demo struct {
	ctx    context.Context
	cfg    Config
	dir    string
	db     *engine.DB
	writes []ack
	report Report
	skey   string // the checkpoint phase's signer key: compaction cuts only inside a signed checkpoint
	phases *phaseProgress
}

// Run runs the demo and returns its report; Report.OK says whether every
// check passed. An error is one that stopped the demo before it could
// report: a Config out of its limits, a Dir that is not empty, a database
// that does not open or a write phase that failed.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if cfg.SegmentSize == 0 {
		// About four segments per anchor for the first round of writes.
		perAnchor := int64(cfg.Writers) * int64(cfg.Records) / int64(cfg.Anchors) * recordBytes
		cfg.SegmentSize = min(max(perAnchor/4, MinSegmentSize), 64<<20)
	}
	d := &demo{ctx: ctx, cfg: cfg, phases: newPhaseProgress(cfg.Progress)}
	defer d.phases.close()
	temp := cfg.Dir == ""
	if temp {
		dir, err := os.MkdirTemp("", "anchordb-demo-")
		if err != nil {
			return Report{}, errs.Wrap(errs.CodeWriteFailed, err, "create a temporary directory")
		}
		d.dir = dir
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	} else {
		d.dir = cfg.Dir
		if names, err := os.ReadDir(d.dir); err == nil && len(names) > 0 {
			return Report{}, errs.New(errs.CodeInvalidInput, "demo needs a fresh database: %s is not empty", d.dir)
		}
	}
	defer func() {
		if d.db != nil {
			_ = d.db.Close()
		}
	}()
	d.report = Report{Dir: d.dir, Kept: !temp || cfg.Keep, Writers: cfg.Writers,
		AnchorsRequested: cfg.Anchors, RecordsPerWriter: cfg.Records, SegmentSize: cfg.SegmentSize,
		Compactions: []Compaction{}}

	if err := d.open(); err != nil {
		return Report{}, err
	}
	d.report.Durability = d.db.Options().DurabilityMode()
	writes, elapsed, err := d.write(1, cfg.Records)
	if err != nil {
		return Report{}, err
	}
	d.writes = writes
	d.report.Written = len(writes)
	d.report.Retries = countRetries(writes)
	d.report.WriteSeconds = elapsed.Seconds()
	if elapsed > 0 {
		d.report.RecordsPerSec = float64(len(writes)) / elapsed.Seconds()
	}
	st, err := d.db.Stats(ctx)
	if err != nil {
		return Report{}, err
	}
	d.report.Anchors, d.report.Records = st.Anchors, st.Records
	d.report.Segments, d.report.SegmentBytes, d.report.IndexBytes = st.SegmentFiles, st.SegmentBytes, st.IndexBytes

	if err := d.checkAll(""); err != nil {
		return Report{}, err
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
			return Report{}, err
		}
		rep := d.db.RecoveryReport()
		d.add("reopen", rep.Clean && len(rep.Events) == 0,
			fmt.Sprintf("clean=%v, %d recovery events", rep.Clean, len(rep.Events)))
		if err := d.checkAll(" after reopen"); err != nil {
			return Report{}, err
		}
		d.laterPhases()
	}

	d.report.OK = true
	for _, c := range d.report.Checks {
		d.report.OK = d.report.OK && c.OK
	}
	return d.report, nil
}

// options are the engine options of the demo database.
func (d *demo) options() engine.Options {
	return engine.Options{Logger: d.cfg.Logger, SegmentSize: d.cfg.SegmentSize}
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
	d.report.Checks = append(d.report.Checks, Check{Name: name, OK: ok, Detail: detail})
}

func errDetail(err error, okDetail string) string {
	if err != nil {
		return err.Error()
	}
	return okDetail
}

func anchorName(i int) string { return fmt.Sprintf("demo/device-%04d", i) }

// write runs a write phase: cfg.Writers goroutines appending n records each
// through the engine with its default (sync) durability. It returns the
// acknowledged appends (not the idempotent retries) and the time it took.
func (d *demo) write(round, n int) ([]ack, time.Duration, error) {
	cfg := d.cfg
	perWriter := make([][]ack, cfg.Writers)
	errc := make(chan error, cfg.Writers)
	var done atomic.Int64
	var wg sync.WaitGroup

	stopProgress, progressDone := make(chan struct{}), make(chan struct{})
	prog := d.cfg.Progress
	total := int64(cfg.Writers) * int64(n)
	go func() {
		defer close(progressDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				updateProgress(prog, "demo: round %d: %d/%s written", round, done.Load(), humanize.Plural(total, "record"))
			}
		}
	}()

	start := time.Now()
	for w := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, 0x616e63686f726462+uint64(round)))
			out := make([]ack, 0, n)
			for i := range n {
				ent := recordFor(rng, cfg, round, w, i)
				r, err := d.db.Append(d.ctx, ent)
				if err != nil {
					errc <- fmt.Errorf("writer %d, record %d: %w", w, i, err)
					return
				}
				out = append(out, ack{entry: ent, receipt: r})
				if len(ent.IdempotencyKey) > 0 {
					// A retry of the same request returns the original receipt.
					again, err := d.db.Append(d.ctx, ent)
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
	endProgress(prog)
	close(errc)
	if err := <-errc; err != nil {
		return nil, elapsed, err
	}
	var writes []ack
	for _, ws := range perWriter {
		writes = append(writes, ws...)
	}
	return writes, elapsed, nil
}

// countRetries counts the appends that were retried with their idempotency
// key (each retry was checked to return the original receipt).
func countRetries(ws []ack) int {
	n := 0
	for _, w := range ws {
		if len(w.entry.IdempotencyKey) > 0 {
			n++
		}
	}
	return n
}

// recordFor is record i of writer w in a round: mostly puts over a shared key
// space, some deletes, some events without a key; every 25th carries an
// idempotency key.
func recordFor(rng *rand.Rand, cfg Config, round, w, i int) engine.Entry {
	ent := engine.Entry{Anchor: anchorName(rng.IntN(cfg.Anchors))}
	key := []byte(fmt.Sprintf("key-%03d", rng.IntN(keySpace)))
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
	ctx := d.ctx
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
			chainProblems = append(chainProblems, fmt.Sprintf("%s: head is #%d %s, the log has %s", info.ID, info.Records, info.HeadHash, humanize.Plural(len(recs), "record")))
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
		chainProblems = append(chainProblems, fmt.Sprintf("the logs hold %s, %d were acknowledged", humanize.Plural(len(all), "record"), appended))
	}
	d.add("chains"+suffix, len(chainProblems) == 0, problems(chainProblems,
		fmt.Sprintf("%s, %s: seqs dense, prev_hash links, hashes recompute, counters increase", humanize.Plural(heads, "anchor"), humanize.Plural(len(all), "record"))))

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
		fmt.Sprintf("%s, each matching its record", humanize.Plural(len(d.writes), "receipt"))))

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
		fmt.Sprintf("%s (%d live): get and scan follow the merged order; counters unique", humanize.Plural(len(last), "key"), live)))
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

// compareMerged orders records by the merged order: (counter, anchor id
// bytes).
func compareMerged(a, b engine.Record) int {
	return merge.CompareKeys(a.Counter, a.Anchor, b.Counter, b.Anchor)
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	return n, err
}
