package bench

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// A body performs n operations of a workload and returns how many records
// they wrote or read. Setup (opening, loading, warming) happens before the
// body is returned, outside the timer; teardown is registered with
// tb.Cleanup, which runs after the timer stops.
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

// Shared fixtures (the 1M-key read databases) outlive single benchmark runs:
// they are built once per process and removed by TestMain.
var (
	fixtureMu       sync.Mutex
	fixtureCleanups []func()
)

func atExit(f func()) {
	fixtureMu.Lock()
	fixtureCleanups = append(fixtureCleanups, f)
	fixtureMu.Unlock()
}

func TestMain(m *testing.M) {
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
