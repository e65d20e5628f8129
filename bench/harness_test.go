package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/bench/harness"
	"github.com/anchordb/anchordb/engine"
	"github.com/cockroachdb/pebble/v2"
)

// A body performs n operations of a workload and returns how many records
// they wrote or read. Setup (opening, loading, warming) happens before the
// body is returned, outside the timer; teardown is registered with
// tb.Cleanup, which runs after the timer stops. A body that writes ends by
// bringing its database to rest (quiesce), inside the timer: equal work
// means the same records on both sides, each side until it is quiescent.
type body func(n int) (records int64, err error)

// A workload prepares a body on a database it opens for tb.
type workload func(tb testing.TB) body

// run measures w over b.N operations and reports records/s.
func run(b *testing.B, w workload) {
	fn := w(b)
	b.ResetTimer()
	recs, err := fn(b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(recs)/b.Elapsed().Seconds(), "records/s")
}

// The test binary's own flags (bench/ratios.sh passes them).
var (
	// small shrinks every fixture (the 1M-key read databases, the 1M and
	// 10M recovery bases, the rebuild and merge logs) to a size that
	// builds in seconds: for a smoke run of the whole suite, never for a
	// measurement.
	small = flag.Bool("anchordb.small", false, "tiny fixtures, for a smoke run of the suite (not a measurement)")
	// printMachine prints the machine line (harness.Machine) and exits.
	printMachine = flag.Bool("anchordb.machine", false, "print the machine line and exit")
	// ratioRows and chartDir: draw the charts of a ratio table (the
	// output of `ratios.sh report -tsv`) into a directory, and exit.
	ratioRows = flag.String("anchordb.ratios", "", "draw the charts of this `ratios.sh report -tsv` output (with -anchordb.charts) and exit")
	chartDir  = flag.String("anchordb.charts", "", "directory for -anchordb.ratios' charts")
)

// drawRatioCharts is the -anchordb.ratios mode.
func drawRatioCharts() error {
	f, err := os.Open(*ratioRows)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr, rows, err := harness.ParseRatioRows(f)
	if err != nil {
		return err
	}
	return harness.WriteRatioCharts(*chartDir, hdr, rows)
}

// sized returns full, or tiny under -anchordb.small.
func sized(full, tiny int) int {
	if *small {
		return tiny
	}
	return full
}

// Shared fixtures (the read databases, the logs of the view and recovery
// benchmarks) outlive single benchmark runs: they are built once per
// process and removed by TestMain — or, when ANCHORDB_BENCH_FIXTURES names
// a directory (bench/ratios.sh sets it), built once there and reused by
// every later process, since the driver runs each sample in a process of
// its own.
var (
	fixtureMu       sync.Mutex
	fixtureCleanups []func()
)

// FixturesEnv names the directory that keeps fixtures across processes.
const FixturesEnv = "ANCHORDB_BENCH_FIXTURES"

func atExit(f func()) {
	fixtureMu.Lock()
	fixtureCleanups = append(fixtureCleanups, f)
	fixtureMu.Unlock()
}

func TestMain(m *testing.M) {
	if runChild() {
		return // a child process of a benchmark: it has done its job (or was killed)
	}
	flag.Parse()
	if *printMachine {
		fmt.Println(harness.Machine(os.TempDir()))
		os.Exit(0)
	}
	if *ratioRows != "" {
		if err := drawRatioCharts(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	fixtureMu.Lock()
	for i := len(fixtureCleanups) - 1; i >= 0; i-- {
		fixtureCleanups[i]()
	}
	fixtureMu.Unlock()
	os.Exit(code)
}

// fixtureDir makes a directory on the real filesystem that lives until the
// process ends.
func fixtureDir(name string) (string, error) {
	dir, err := os.MkdirTemp("", "anchordb-bench-"+name+"-")
	if err != nil {
		return "", err
	}
	atExit(func() { _ = os.RemoveAll(dir) })
	return dir, nil
}

// fixtureDone marks a kept fixture as whole.
const fixtureDone = ".complete"

// keptFixture returns a directory holding the fixture name (build fills an
// empty directory). Under ANCHORDB_BENCH_FIXTURES it is kept there and
// built once, a half-built one (no completion mark) built again;
// otherwise it is a temporary directory of this process. The fixture must
// come out of each benchmark equivalent to how it went in.
func keptFixture(name string, build func(dir string) error) (string, error) {
	root := os.Getenv(FixturesEnv)
	if root == "" {
		dir, err := fixtureDir(name)
		if err != nil {
			return "", err
		}
		return dir, build(dir)
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, fixtureDone)); err == nil {
		return dir, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := build(dir); err != nil {
		return "", fmt.Errorf("fixture %s: %w", name, err)
	}
	return dir, os.WriteFile(filepath.Join(dir, fixtureDone), nil, 0o644)
}

// onceBySize builds a value once per size and remembers the result (and the
// error) for every later caller.
type onceBySize[T any] struct {
	mu sync.Mutex
	m  map[int]*onceResult[T]
}

type onceResult[T any] struct {
	once sync.Once
	v    T
	err  error
}

func (o *onceBySize[T]) get(n int, build func(n int) (T, error)) (T, error) {
	o.mu.Lock()
	if o.m == nil {
		o.m = make(map[int]*onceResult[T])
	}
	r := o.m[n]
	if r == nil {
		r = &onceResult[T]{}
		o.m[n] = r
	}
	o.mu.Unlock()
	r.once.Do(func() { r.v, r.err = build(n) })
	return r.v, r.err
}

// kvBuf is one goroutine's key and value buffers.
type kvBuf struct {
	k [KeySize]byte
	v [ValueSize]byte
}

func (b *kvBuf) kv(i uint64) (key, value []byte) { return Key(b.k[:], i), Value(b.v[:], i) }

func checkValue(got []byte, i uint64) error {
	var want [ValueSize]byte
	if string(got) != string(Value(want[:], i)) {
		return fmt.Errorf("key %d: value of %d bytes does not match what was loaded", i, len(got))
	}
	return nil
}

// A quiet database: both sides of every write benchmark stop their clock
// only at rest, by the same rule (docs/PERFORMANCE.md, "Method").

// engineDB is an engine database opened with an LSMWatch on its index.
type engineDB struct {
	*engine.DB
	watch *harness.LSMWatch
}

// openWatched opens a database in dir (a new temporary directory if empty)
// with a watch on its index's flushes and compactions, closed when tb ends.
func openWatched(tb testing.TB, dir string, opts engine.Options) engineDB {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	w := &harness.LSMWatch{}
	opts.PebbleOptions = w.Install
	db, err := engine.Open(dir, opts)
	if err != nil {
		tb.Fatalf("open engine: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("close engine: %v", err)
		}
	})
	return engineDB{db, w}
}

// quiesce settles the engine (segments fsynced, the index flushed, the
// journal trimmed) and waits until its index has no flush or compaction in
// progress.
func (e engineDB) quiesce(ctx context.Context) error {
	if err := e.Sync(ctx); err != nil {
		return err
	}
	return e.watch.Quiesce(ctx)
}

// pebbleDB is a Pebble peer with an LSMWatch.
type pebbleDB struct {
	*pebble.DB
	watch *harness.LSMWatch
}

// quiesce flushes the peer's memtables and waits until it has no flush or
// compaction in progress.
func (p pebbleDB) quiesce(ctx context.Context) error {
	if err := p.Flush(); err != nil {
		return err
	}
	return p.watch.Quiesce(ctx)
}
