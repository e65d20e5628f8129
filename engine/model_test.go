package engine

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"
)

// A rapid state machine of the engine against a model that is nothing but a
// log per anchor, a map of idempotency keys and the Lamport clock. Every
// read — Get, History, Scan, Log, the anchor heads — is derived from the
// model's logs in merged order, (counter, anchor id bytes), and compared with
// the engine after every action. Reopen closes cleanly and opens again;
// CrashReopen takes the state a power loss would leave (a crash clone with no
// unsynced data) in sync mode, where the model keeps everything acknowledged.

// Anchor ids that look like paths, non-ASCII, and ids that prefix one
// another, so raw-byte order and path safety both matter.
var modelAnchors = []string{"../x", "a/b", "é", "Z", "a", "ab", "."}

// Keys with a 0x00 byte and keys that prefix one another.
var modelKeys = []string{"k", "k1", "k2", "k\x00", "k\x00a", "ka", "z", "\xff"}

var modelPrefixes = []string{"", "k", "k\x00", "k1", "z", "\xff", "q"}

var modelTypes = []string{segment.TypePut, segment.TypePut, segment.TypeDelete, "EVENT", "Ünïcode-event"}

type modelRecord struct {
	anchor  string
	seq     uint64
	counter uint64
	typ     string
	key     []byte
	value   []byte
	idem    []byte
	hash    segment.Hash
}

type modelIdem struct {
	seq         uint64
	fingerprint segment.Hash
}

// model is the expected state. It is a value type at the top, so a batch can
// work on a copy and be thrown away when refused.
type model struct {
	logs  map[string][]modelRecord
	idem  map[string]modelIdem // anchor \x00 key
	clock uint64
}

func newModel() *model {
	return &model{logs: map[string][]modelRecord{}, idem: map[string]modelIdem{}}
}

func (m *model) clone() *model {
	c := &model{logs: make(map[string][]modelRecord, len(m.logs)), idem: make(map[string]modelIdem, len(m.idem)), clock: m.clock}
	for k, v := range m.logs {
		c.logs[k] = slices.Clone(v)
	}
	for k, v := range m.idem {
		c.idem[k] = v
	}
	return c
}

func (m *model) lastCounter(anchor string) uint64 {
	if l := m.logs[anchor]; len(l) > 0 {
		return l[len(l)-1].counter
	}
	return 0
}

// outcome is what the model expects of one entry.
type outcome struct {
	receipt  Receipt // for a duplicate: the original, Duplicate set
	code     Code    // a refusal: STATE_002
	conflict bool    // an idempotency conflict (else a counter refusal)
	original Receipt // for a conflict
}

// apply applies one entry to the model, or reports why it is refused. A
// new record's hash is filled in from the engine's receipt by the caller.
func (m *model) apply(e Entry) outcome {
	if len(e.IdempotencyKey) > 0 {
		k := e.Anchor + "\x00" + string(e.IdempotencyKey)
		if prior, ok := m.idem[k]; ok {
			rec := m.logs[e.Anchor][prior.seq-1]
			orig := Receipt{Anchor: e.Anchor, Seq: rec.seq, Counter: rec.counter, Hash: rec.hash}
			if prior.fingerprint != segment.Fingerprint(e.Type, e.Key, e.Value) {
				// SPEC §7: the receipt the original append got.
				return outcome{code: ErrConflict.Code, conflict: true, original: orig}
			}
			orig.Duplicate = true
			return outcome{receipt: orig}
		}
	}
	last := m.lastCounter(e.Anchor)
	counter := e.Counter
	if counter != 0 {
		if counter <= last {
			return outcome{code: ErrConflict.Code}
		}
	} else {
		counter = max(last, m.clock) + 1
	}
	seq := uint64(len(m.logs[e.Anchor]) + 1)
	m.logs[e.Anchor] = append(m.logs[e.Anchor], modelRecord{
		anchor: e.Anchor, seq: seq, counter: counter, typ: e.Type,
		key: slices.Clone(e.Key), value: slices.Clone(e.Value), idem: slices.Clone(e.IdempotencyKey),
	})
	if len(e.IdempotencyKey) > 0 {
		m.idem[e.Anchor+"\x00"+string(e.IdempotencyKey)] = modelIdem{seq: seq, fingerprint: segment.Fingerprint(e.Type, e.Key, e.Value)}
	}
	m.clock = max(m.clock, counter)
	return outcome{receipt: Receipt{Anchor: e.Anchor, Seq: seq, Counter: counter}}
}

// setHash records the hash the engine computed for a new record.
func (m *model) setHash(r Receipt) {
	m.logs[r.Anchor][r.Seq-1].hash = r.Hash
}

// merged returns every key-value record in merged order.
func (m *model) merged() []modelRecord {
	var all []modelRecord
	for _, l := range m.logs {
		for _, r := range l {
			if r.typ == segment.TypePut || r.typ == segment.TypeDelete {
				all = append(all, r)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].counter != all[j].counter {
			return all[i].counter < all[j].counter
		}
		return all[i].anchor < all[j].anchor // Go compares strings as raw bytes
	})
	return all
}

// history returns the versions of key in merged order.
func (m *model) history(key []byte) []modelRecord {
	var out []modelRecord
	for _, r := range m.merged() {
		if bytes.Equal(r.key, key) {
			out = append(out, r)
		}
	}
	return out
}

// latest returns the live value of every key.
func (m *model) latest() map[string]modelRecord {
	out := map[string]modelRecord{}
	for _, r := range m.merged() {
		out[string(r.key)] = r
	}
	for k, r := range out {
		if r.typ == segment.TypeDelete {
			delete(out, k)
		}
	}
	return out
}

// modelMachine drives the engine and the model together.
type modelMachine struct {
	mem      *vfs.MemFS
	db       *DB
	m        *model
	ctx      context.Context
	steps    []string // what happened, for the failure message
	unsynced bool     // a NoSync append since the last Sync or reopen
}

func modelOptions(fs vfs.FS) Options {
	// Small segments so logs seal; a settle threshold so journals rotate.
	return Options{FS: fs, SegmentSize: 4096, SettleBytes: 8 << 10}
}

func (mm *modelMachine) logf(format string, args ...any) {
	mm.steps = append(mm.steps, fmt.Sprintf(format, args...))
}

func (mm *modelMachine) fail(t *rapid.T, format string, args ...any) {
	t.Helper()
	tail := mm.steps
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	t.Fatalf("%s\nlast steps:\n  %s", fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func drawEntry(t *rapid.T, m *model) Entry {
	an := rapid.SampledFrom(modelAnchors).Draw(t, "anchor")
	typ := rapid.SampledFrom(modelTypes).Draw(t, "type")
	e := Entry{Anchor: an, Type: typ}
	switch typ {
	case segment.TypePut:
		e.Key = []byte(rapid.SampledFrom(modelKeys).Draw(t, "key"))
		n := rapid.SampledFrom([]int{0, 1, 7, 300, 900, 5000}).Draw(t, "vlen")
		e.Value = bytes.Repeat([]byte{byte(rapid.IntRange('a', 'e').Draw(t, "vbyte"))}, n)
	case segment.TypeDelete:
		e.Key = []byte(rapid.SampledFrom(modelKeys).Draw(t, "key"))
	default:
		if rapid.Bool().Draw(t, "eventKey") {
			e.Key = []byte(rapid.SampledFrom(modelKeys).Draw(t, "key"))
		}
		e.Value = []byte(rapid.SampledFrom([]string{"", "payload", strings.Repeat("p", 700)}).Draw(t, "payload"))
	}
	if rapid.IntRange(0, 3).Draw(t, "idem?") == 0 {
		e.IdempotencyKey = []byte(rapid.SampledFrom([]string{"op-1", "op-2", "op-3"}).Draw(t, "idem"))
	}
	switch rapid.IntRange(0, 5).Draw(t, "counter?") {
	case 0: // valid: above the anchor's last, maybe below the clock
		e.Counter = m.lastCounter(an) + uint64(rapid.IntRange(1, 4).Draw(t, "gap"))
	case 1: // invalid: not above the anchor's last
		if last := m.lastCounter(an); last > 0 {
			e.Counter = uint64(rapid.IntRange(1, int(min(last, 1<<20))).Draw(t, "low"))
		}
	}
	return e
}

func (mm *modelMachine) checkOutcome(t *rapid.T, what string, want outcome, got Receipt, err error) {
	t.Helper()
	if want.code != "" {
		if CodeOf(err) != want.code {
			mm.fail(t, "%s: want %s, got %+v %v", what, want.code, got, err)
		}
		if want.conflict {
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Original != want.original {
				mm.fail(t, "%s: conflict should carry the original receipt %+v: %v", what, want.original, err)
			}
		}
		return
	}
	if err != nil {
		mm.fail(t, "%s: unexpected error %v", what, err)
	}
	w := want.receipt
	if w.Duplicate {
		if got != w {
			mm.fail(t, "%s: duplicate receipt %+v, want %+v", what, got, w)
		}
		return
	}
	if got.Anchor != w.Anchor || got.Seq != w.Seq || got.Counter != w.Counter || got.Duplicate || got.Hash.IsZero() {
		mm.fail(t, "%s: receipt %+v, want anchor %q seq %d counter %d", what, got, w.Anchor, w.Seq, w.Counter)
	}
}

func (mm *modelMachine) Append(t *rapid.T) {
	e := drawEntry(t, mm.m)
	want := mm.m.apply(e)
	got, err := mm.db.Append(mm.ctx, e)
	mm.logf("append %s %q key %q %d bytes idem %q counter %d → %+v %v", e.Type, e.Anchor, e.Key, len(e.Value), e.IdempotencyKey, e.Counter, got, err)
	mm.checkOutcome(t, "append", want, got, err)
	if want.code == "" && !want.receipt.Duplicate {
		mm.m.setHash(got)
	}
}

// AppendNoSync appends with NoSync: acknowledged once written, applied
// behind. Check's reads, which run next, must see it (read-your-writes).
// Until a Sync the record is not durable: CrashReopen syncs first, so the
// model keeps what it acknowledged.
func (mm *modelMachine) AppendNoSync(t *rapid.T) {
	e := drawEntry(t, mm.m)
	want := mm.m.apply(e)
	got, err := mm.db.Append(mm.ctx, e, WithNoSync(true))
	mm.logf("append nosync %s %q key %q %d bytes idem %q counter %d → %+v %v", e.Type, e.Anchor, e.Key, len(e.Value), e.IdempotencyKey, e.Counter, got, err)
	mm.checkOutcome(t, "append nosync", want, got, err)
	if want.code == "" && !want.receipt.Duplicate {
		mm.m.setHash(got)
	}
	mm.unsynced = true
	// Read back at once, before anything else can apply it.
	if want.code == "" && (e.Type == segment.TypePut || e.Type == segment.TypeDelete) {
		mm.checkGet(t, e.Key)
	}
}

func (mm *modelMachine) AppendBatch(t *rapid.T) {
	n := rapid.IntRange(1, 4).Draw(t, "batch")
	es := make([]Entry, n)
	scratch := mm.m.clone()
	wants := make([]outcome, n)
	refused := -1
	for i := range es {
		es[i] = drawEntry(t, scratch)
		wants[i] = scratch.apply(es[i])
		if wants[i].code != "" && refused < 0 {
			refused = i
		}
	}
	got, err := mm.db.AppendBatch(mm.ctx, es)
	mm.logf("batch of %d (first refusal at %d) → %d receipts %v", n, refused, len(got), err)
	if refused >= 0 {
		// One refused entry refuses the batch: nothing is appended.
		w := wants[refused]
		if CodeOf(err) != w.code || len(got) != 0 {
			mm.fail(t, "batch with entry %d refused: want %s and no receipts, got %d receipts %v", refused, w.code, len(got), err)
		}
		if w.conflict {
			var ce *ConflictError
			orig := w.original
			if ce2 := (*ConflictError)(nil); errors.As(err, &ce2) && orig.Hash.IsZero() {
				// The original is an earlier entry of this same batch: its
				// hash is the engine's to tell.
				orig.Hash = ce2.Original.Hash
			}
			if !errors.As(err, &ce) || ce.Original != orig {
				mm.fail(t, "batch conflict should carry the original receipt %+v: %v", w.original, err)
			}
		}
		return
	}
	if err != nil || len(got) != n {
		mm.fail(t, "batch: %d receipts, %v", len(got), err)
	}
	for i := range es {
		if !wants[i].receipt.Duplicate {
			scratch.setHash(got[i])
		}
	}
	for i := range es {
		w := wants[i]
		if w.receipt.Duplicate && w.receipt.Hash.IsZero() {
			// A duplicate of an earlier entry of this batch: its hash is
			// known only now.
			w.receipt.Hash = scratch.logs[w.receipt.Anchor][w.receipt.Seq-1].hash
		}
		mm.checkOutcome(t, fmt.Sprintf("batch entry %d", i), w, got[i], nil)
	}
	mm.m = scratch
}

func (mm *modelMachine) Retry(t *rapid.T) {
	// Repeat an earlier idempotent append exactly, or change its request.
	var cands []modelRecord
	for _, an := range modelAnchors {
		for _, r := range mm.m.logs[an] {
			if len(r.idem) > 0 {
				cands = append(cands, r)
			}
		}
	}
	if len(cands) == 0 {
		t.Skip("no idempotent record yet")
	}
	r := rapid.SampledFrom(cands).Draw(t, "original")
	e := Entry{Anchor: r.anchor, Type: r.typ, Key: r.key, Value: r.value, IdempotencyKey: r.idem}
	if rapid.Bool().Draw(t, "changed") {
		e.Value = append(slices.Clone(r.value), '!')
		if e.Type == segment.TypeDelete {
			e.Type = segment.TypePut
		}
	}
	want := mm.m.apply(e)
	got, err := mm.db.Append(mm.ctx, e)
	mm.logf("retry %q idem %q (value %d bytes) → %+v %v", e.Anchor, e.IdempotencyKey, len(e.Value), got, err)
	mm.checkOutcome(t, "retry", want, got, err)
}

func (mm *modelMachine) Get(t *rapid.T) {
	key := []byte(rapid.SampledFrom(modelKeys).Draw(t, "key"))
	mm.checkGet(t, key)
}

func (mm *modelMachine) checkGet(t *rapid.T, key []byte) {
	got, err := mm.db.Get(mm.ctx, key)
	w, ok := mm.m.latest()[string(key)]
	if !ok {
		if !errors.Is(err, ErrNotFound) {
			mm.fail(t, "get %q: want not found, got %+v %v", key, got, err)
		}
		return
	}
	if err != nil || !bytes.Equal(got.Value, w.value) || got.Anchor != w.anchor || got.Seq != w.seq || got.Counter != w.counter || got.Hash != w.hash {
		mm.fail(t, "get %q = %q from %q seq %d counter %d (%v); want %d bytes from %q seq %d counter %d", key, clipBytes(got.Value), got.Anchor, got.Seq, got.Counter, err, len(w.value), w.anchor, w.seq, w.counter)
	}
}

func clipBytes(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}

func (mm *modelMachine) History(t *rapid.T) {
	key := []byte(rapid.SampledFrom(modelKeys).Draw(t, "key"))
	want := mm.m.history(key)
	var got []Record
	for rec, err := range mm.db.History(mm.ctx, key) {
		if err != nil {
			mm.fail(t, "history %q: %v", key, err)
		}
		got = append(got, rec)
	}
	if len(got) != len(want) {
		mm.fail(t, "history %q: %d versions, want %d", key, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Anchor != w.anchor || g.Seq != w.seq || g.Counter != w.counter || g.Hash != w.hash || g.Type != w.typ || !bytes.Equal(g.Value, w.value) {
			mm.fail(t, "history %q version %d: %q seq %d counter %d, want %q seq %d counter %d", key, i, g.Anchor, g.Seq, g.Counter, w.anchor, w.seq, w.counter)
		}
	}
	// Versions is the same history from the index, values included.
	i := 0
	for v, err := range mm.db.Versions(mm.ctx, key) {
		if err != nil {
			mm.fail(t, "versions %q: %v", key, err)
		}
		if i >= len(want) {
			mm.fail(t, "versions %q: more than the %d versions of the model", key, len(want))
		}
		w := want[i]
		if v.Anchor != w.anchor || v.Seq != w.seq || v.Counter != w.counter || v.Hash != w.hash ||
			v.Deleted != (w.typ == segment.TypeDelete) || !bytes.Equal(v.Value, w.value) || !bytes.Equal(v.Key, key) {
			mm.fail(t, "versions %q version %d: %q seq %d counter %d deleted %v, want %q seq %d counter %d type %s", key, i, v.Anchor, v.Seq, v.Counter, v.Deleted, w.anchor, w.seq, w.counter, w.typ)
		}
		i++
	}
	if i != len(want) {
		mm.fail(t, "versions %q: %d versions, want %d", key, i, len(want))
	}
}

func (mm *modelMachine) Scan(t *rapid.T) {
	prefix := []byte(rapid.SampledFrom(modelPrefixes).Draw(t, "prefix"))
	mm.checkScan(t, prefix)
}

func (mm *modelMachine) checkScan(t *rapid.T, prefix []byte) {
	latest := mm.m.latest()
	var wantKeys []string
	for k := range latest {
		if strings.HasPrefix(k, string(prefix)) {
			wantKeys = append(wantKeys, k)
		}
	}
	sort.Strings(wantKeys)
	var gotKeys []string
	for v, err := range mm.db.Scan(mm.ctx, prefix) {
		if err != nil {
			mm.fail(t, "scan %q: %v", prefix, err)
		}
		w, ok := latest[string(v.Key)]
		if !ok || v.Anchor != w.anchor || v.Seq != w.seq || !bytes.Equal(v.Value, w.value) {
			mm.fail(t, "scan %q returned %q from %q seq %d, want %v", prefix, v.Key, v.Anchor, v.Seq, ok)
		}
		gotKeys = append(gotKeys, string(v.Key))
	}
	if !slices.Equal(gotKeys, wantKeys) {
		mm.fail(t, "scan %q: keys %q, want %q", prefix, gotKeys, wantKeys)
	}
}

// drawFrontier draws a prefix of every anchor log of the model.
func (mm *modelMachine) drawFrontier(t *rapid.T) merge.Frontier {
	f := merge.Frontier{}
	for _, an := range modelAnchors {
		if n := len(mm.m.logs[an]); n > 0 {
			if s := rapid.IntRange(0, n).Draw(t, "seq "+an); s > 0 {
				f[an] = uint64(s)
			}
		}
	}
	return f
}

// GetAt: the last put or delete of a key in merged order among the records
// a frontier contains.
func (mm *modelMachine) GetAt(t *rapid.T) {
	key := []byte(rapid.SampledFrom(modelKeys).Draw(t, "key"))
	f := mm.drawFrontier(t)
	var w *modelRecord
	for _, r := range mm.m.history(key) {
		if f.Contains(r.anchor, r.seq) {
			w = &r
		}
	}
	got, err := mm.db.GetAt(mm.ctx, key, f)
	mm.logf("getat %q %v → %q seq %d %v", key, f, got.Anchor, got.Seq, err)
	if w == nil || w.typ == segment.TypeDelete {
		if !errors.Is(err, ErrNotFound) {
			mm.fail(t, "getat %q at %v: want not found, got %q seq %d %v", key, f, got.Anchor, got.Seq, err)
		}
		return
	}
	if err != nil || !bytes.Equal(got.Value, w.value) || got.Anchor != w.anchor || got.Seq != w.seq || got.Counter != w.counter || got.Hash != w.hash {
		mm.fail(t, "getat %q at %v = %q seq %d counter %d (%v); want %q seq %d counter %d", key, f, got.Anchor, got.Seq, got.Counter, err, w.anchor, w.seq, w.counter)
	}
}

// ScanRange: the live keys in [start, end), a nil end meaning no end.
func (mm *modelMachine) ScanRange(t *rapid.T) {
	bounds := append(slices.Clone(modelKeys), modelPrefixes...)
	start := []byte(rapid.SampledFrom(bounds).Draw(t, "start"))
	var end []byte
	if rapid.Bool().Draw(t, "end?") {
		end = []byte(rapid.SampledFrom(bounds).Draw(t, "end"))
	}
	latest := mm.m.latest()
	var want []string
	for k := range latest {
		if k >= string(start) && (end == nil || k < string(end)) {
			want = append(want, k)
		}
	}
	sort.Strings(want)
	var got []string
	for v, err := range mm.db.ScanRange(mm.ctx, start, end) {
		if err != nil {
			mm.fail(t, "scan range [%q, %q): %v", start, end, err)
		}
		w := latest[string(v.Key)]
		if v.Anchor != w.anchor || v.Seq != w.seq || !bytes.Equal(v.Value, w.value) {
			mm.fail(t, "scan range [%q, %q): %q from %q seq %d, want %q seq %d", start, end, v.Key, v.Anchor, v.Seq, w.anchor, w.seq)
		}
		got = append(got, string(v.Key))
	}
	if !slices.Equal(got, want) {
		mm.fail(t, "scan range [%q, %q): keys %q, want %q", start, end, got, want)
	}
}

// Merged: every record of every anchor, events included, in merged order
// with positions from 1; at the current frontier or a drawn one, from a
// drawn position.
func (mm *modelMachine) Merged(t *rapid.T) {
	var opts MergedOptions
	f := merge.Frontier{}
	for an, l := range mm.m.logs {
		if len(l) > 0 {
			f[an] = uint64(len(l))
		}
	}
	if rapid.Bool().Draw(t, "at frontier") {
		f = mm.drawFrontier(t)
		opts.Frontier = f
	}
	opts.From = uint64(rapid.IntRange(0, 4).Draw(t, "from"))
	after := merge.Frontier{}
	if rapid.Bool().Draw(t, "after?") {
		// The view after an earlier frontier: any prefix of f.
		for _, an := range f.Anchors() { // sorted: draws replay in order
			if s := rapid.IntRange(0, int(f[an])).Draw(t, "after "+an); s > 0 {
				after[an] = uint64(s)
			}
		}
		opts.After = after
	}
	var all []modelRecord
	for an, l := range mm.m.logs {
		all = append(all, l[min(after[an], f[an]):f[an]]...)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].counter != all[j].counter {
			return all[i].counter < all[j].counter
		}
		return all[i].anchor < all[j].anchor
	})
	first := max(opts.From, 1)
	var got []Positioned
	for p, err := range mm.db.Merged(mm.ctx, opts) {
		if err != nil {
			mm.fail(t, "merged %+v: %v", opts, err)
		}
		got = append(got, p)
	}
	want := all[min(first-1, uint64(len(all))):]
	if len(got) != len(want) {
		mm.fail(t, "merged %+v: %d records, want %d", opts, len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Pos != first+uint64(i) || g.Record.Anchor != w.anchor || g.Record.Seq != w.seq || g.Record.Hash != w.hash {
			mm.fail(t, "merged %+v position %d: %q seq %d at %d, want %q seq %d", opts, first+uint64(i), g.Record.Anchor, g.Record.Seq, g.Pos, w.anchor, w.seq)
		}
	}
}

func (mm *modelMachine) Log(t *rapid.T) {
	an := rapid.SampledFrom(modelAnchors).Draw(t, "anchor")
	n := len(mm.m.logs[an])
	from := uint64(rapid.IntRange(0, n+2).Draw(t, "from"))
	to := uint64(rapid.IntRange(0, n+2).Draw(t, "to"))
	mm.checkLog(t, an, from, to)
}

func (mm *modelMachine) checkLog(t *rapid.T, an string, from, to uint64) {
	log := mm.m.logs[an]
	var want []modelRecord
	for _, r := range log {
		if r.seq >= max(from, 1) && (to == 0 || r.seq <= to) {
			want = append(want, r)
		}
	}
	var got []Record
	for rec, err := range mm.db.Log(mm.ctx, an, from, to) {
		if len(log) == 0 {
			// An anchor with no record is none the database holds.
			if !errors.Is(err, ErrDependencyMissing) {
				mm.fail(t, "log of %q, which has no records: %v, want STATE_003", an, err)
			}
			return
		}
		if err != nil {
			mm.fail(t, "log %q [%d, %d]: %v", an, from, to, err)
		}
		got = append(got, rec)
	}
	if len(log) == 0 {
		mm.fail(t, "log of %q, which has no records, yielded nothing: want STATE_003", an)
	}
	if len(got) != len(want) {
		mm.fail(t, "log %q [%d, %d]: %d records, want %d", an, from, to, len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		prev := segment.GenesisHash(an)
		if w.seq > 1 {
			prev = log[w.seq-2].hash
		}
		if g.Seq != w.seq || g.Counter != w.counter || g.Hash != w.hash || g.PrevHash != prev || g.Type != w.typ ||
			!bytes.Equal(g.Key, w.key) || !bytes.Equal(g.Value, w.value) || !bytes.Equal(g.IdempotencyKey, w.idem) || g.Anchor != an {
			mm.fail(t, "log %q record %d differs from the model: %+v", an, w.seq, g)
		}
	}
}

func (mm *modelMachine) Reopen(t *rapid.T) {
	if err := mm.db.Close(); err != nil {
		mm.fail(t, "close: %v", err)
	}
	db, err := Open("db", modelOptions(mm.mem))
	if err != nil {
		mm.fail(t, "reopen: %v", err)
	}
	mm.db = db
	mm.unsynced = false
	mm.logf("reopen")
	if !db.RecoveryReport().Clean {
		mm.fail(t, "reopen after a clean close ran recovery: %+v", db.RecoveryReport())
	}
}

func (mm *modelMachine) CrashReopen(t *rapid.T) {
	if mm.unsynced {
		// NoSync appends are not durable until a Sync; the model keeps
		// every acknowledged append, so make them durable first.
		if err := mm.db.Sync(context.Background()); err != nil {
			mm.fail(t, "sync: %v", err)
		}
		mm.logf("sync")
	}
	mm.unsynced = false
	clone := testutil.CrashClone(mm.mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	// The old process is gone: release it without letting it touch the clone.
	_ = mm.db.Close()
	mm.mem = clone
	db, err := Open("db", modelOptions(clone))
	if err != nil {
		mm.fail(t, "open after a crash: %v", err)
	}
	mm.db = db
	mm.logf("crash and reopen: %v", db.RecoveryReport().Events)
	for _, ev := range db.RecoveryReport().Events {
		if ev.Kind == EventDamaged {
			mm.fail(t, "recovery after a crash found damage: %v", ev)
		}
	}
}

// Check runs after every action: the whole engine state against the model.
func (mm *modelMachine) Check(t *rapid.T) {
	var ids []string
	for info, err := range mm.db.Anchors(mm.ctx) {
		if err != nil {
			mm.fail(t, "anchors: %v", err)
		}
		ids = append(ids, info.ID)
		log := mm.m.logs[info.ID]
		if len(log) == 0 {
			mm.fail(t, "anchor %q listed but has no records in the model", info.ID)
		}
		last := log[len(log)-1]
		if info.Records != last.seq || info.HeadHash != last.hash || info.LastCounter != last.counter || info.Damage != "" {
			mm.fail(t, "anchor %q head %+v, want seq %d counter %d", info.ID, info, last.seq, last.counter)
		}
	}
	var want []string
	for an, l := range mm.m.logs {
		if len(l) > 0 {
			want = append(want, an)
		}
	}
	sort.Strings(want)
	if !slices.Equal(ids, want) {
		mm.fail(t, "anchors %q, want %q", ids, want)
	}
	for _, an := range want {
		mm.checkLog(t, an, 1, 0)
	}
	for _, k := range modelKeys {
		mm.checkGet(t, []byte(k))
	}
	mm.checkScan(t, nil)
	// The clock: the next default counter is above every counter so far.
	if st, err := mm.db.Stats(mm.ctx); err != nil || st.Clock != mm.m.clock {
		mm.fail(t, "clock %d (%v), want %d", st.Clock, err, mm.m.clock)
	}
}

func TestModel(t *testing.T) {
	// A failing case is reported with its seed (-rapid.seed); do not leave
	// fail files in the source tree unless asked to.
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.nofailfile" || f.Name == "rapid.failfile" {
			explicit = true
		}
	})
	if f := flag.Lookup("rapid.nofailfile"); f != nil && !explicit {
		_ = f.Value.Set("true")
	}
	rapid.Check(t, func(t *rapid.T) {
		mem := vfs.NewCrashableMem()
		db, err := Open("db", modelOptions(mem))
		if err != nil {
			t.Fatal(err)
		}
		mm := &modelMachine{mem: mem, db: db, m: newModel(), ctx: context.Background()}
		defer func() { _ = mm.db.Close() }()
		t.Repeat(map[string]func(*rapid.T){
			"Append":      mm.Append,
			"AppendMore":  mm.Append,
			"AppendBatch": mm.AppendBatch,
			"NoSync":      mm.AppendNoSync,
			"GetAt":       mm.GetAt,
			"ScanRange":   mm.ScanRange,
			"Merged":      mm.Merged,
			"Retry":       mm.Retry,
			"Get":         mm.Get,
			"History":     mm.History,
			"Scan":        mm.Scan,
			"Log":         mm.Log,
			"Reopen":      mm.Reopen,
			"CrashReopen": mm.CrashReopen,
			"":            mm.Check,
		})
	})
}
