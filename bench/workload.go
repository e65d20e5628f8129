// Package bench is anchordb's benchmark suite. Every engine benchmark has a
// peer — Pebble doing the same work on the same keys and values, or the
// least any implementation must do — and bench/ratios.sh runs the two as
// paired, alternated samples (engine, peer, engine, peer, …, each in a
// process of its own, the same fixed count of records on both sides, each
// side's clock stopping when it is at rest), so the ratio between the two
// means something on any machine while the absolute numbers only describe
// this one.
//
// The workload (shared by engine and peer):
//
//	key i    16 bytes: mix(i) ‖ i, both u64 big-endian. mix is a bijection
//	         (the SplitMix64 finalizer), so keys are distinct and successive
//	         i land far apart in key order, as random keys would.
//	value i  100 bytes: a window of a fixed pseudo-random pool (so no
//	         compressor shrinks it to nothing) with i in the first 8 bytes.
//
// The benchmarks live in the _test.go files beside this one;
// docs/PERFORMANCE.md describes the method and the measured tables, and
// ratios.sh runs the pairs and prints the median of the per-sample ratios.
package bench

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
)

// Sizes of the workload's keys and values.
const (
	KeySize   = 16
	ValueSize = 100
)

var be = binary.BigEndian

// mix is the SplitMix64 finalizer: a bijection on uint64 that scatters
// neighbouring inputs.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Key writes key i into dst[:KeySize] and returns that slice. dst must have
// room for KeySize bytes.
func Key(dst []byte, i uint64) []byte {
	dst = dst[:KeySize]
	be.PutUint64(dst[0:8], mix(i))
	be.PutUint64(dst[8:16], i)
	return dst
}

const poolSize = 4096

// valuePool is the fixed pseudo-random source of values.
var valuePool = func() []byte {
	p := make([]byte, poolSize+ValueSize)
	for i := 0; i < len(p); i += 8 {
		var w [8]byte
		be.PutUint64(w[:], mix(uint64(i)+0x9e3779b97f4a7c15))
		copy(p[i:], w[:])
	}
	return p
}()

// Value writes value i into dst[:ValueSize] and returns that slice. dst must
// have room for ValueSize bytes.
func Value(dst []byte, i uint64) []byte {
	dst = dst[:ValueSize]
	off := mix(i^0x5bd1e995) % poolSize
	copy(dst, valuePool[off:off+ValueSize])
	be.PutUint64(dst[0:8], i)
	return dst
}

// bigPoolSize is the pool of the sweeps' larger values: pseudo-random bytes
// (so no compressor shrinks them) four times the largest value.
const bigPoolSize = 4 << 20

var bigPool = sync.OnceValue(func() []byte {
	p := make([]byte, bigPoolSize+(1<<20))
	for i := 0; i < len(p); i += 8 {
		be.PutUint64(p[i:], mix(uint64(i)^0x7f4a7c159e3779b9))
	}
	return p
})

// ValueN writes value i of n bytes into dst[:n] and returns that slice: for
// n = ValueSize it is Value; otherwise a window of a 4 MiB pseudo-random
// pool (so values of 1 KiB to 1 MiB neither repeat within a value nor
// compress), with i in the first 8 bytes. n must be at most 1 MiB.
func ValueN(dst []byte, i uint64, n int) []byte {
	if n == ValueSize {
		return Value(dst, i)
	}
	dst = dst[:n]
	off := mix(i^0x5bd1e995) % bigPoolSize
	copy(dst, bigPool()[off:off+uint64(n)])
	if n >= 8 {
		be.PutUint64(dst[0:8], i)
	}
	return dst
}

// AnchorIDs returns n anchor ids: "anchor-0000", "anchor-0001", ….
func AnchorIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("anchor-%04d", i)
	}
	return ids
}

// Order is a fixed permutation of [0, n): Order(i) visits every index once
// per n calls, in an order unrelated to insertion order (i·stride mod n with
// stride coprime to n).
type Order struct {
	n, stride uint64
}

// NewOrder returns the permutation of [0, n). n must be positive.
func NewOrder(n int) Order {
	s := uint64(n)/2 + uint64(n)/7 + 1 // far from 1 and from n/2
	for gcd(s, uint64(n)) != 1 {
		s++
	}
	return Order{n: uint64(n), stride: s % uint64(n)}
}

// At returns the i-th index of the permutation (i may exceed n: it wraps).
func (o Order) At(i int) uint64 {
	if o.n == 1 {
		return 0
	}
	// NB: uint64(i)%n · stride < n² fits 64 bits for n < 2^32.
	return (uint64(i) % o.n) * o.stride % o.n
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Parallel runs op(w, i) for every i in [0, n) on writers goroutines (w is
// the goroutine's number, 0..writers-1, for per-goroutine buffers). Each
// goroutine takes the next index from one shared counter until n is
// reached, so the work divides exactly whatever b.N is. It returns the first
// error; after an error the goroutines stop taking work.
func Parallel(n, writers int, op func(w, i int) error) error {
	var (
		next    atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for !stop.Load() {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := op(w, int(i)); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("op %d: %w", i, err) })
					stop.Store(true)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	return first
}

// quietLogger is the peers' Pebble logger. Info lines are dropped; errors
// are kept (printed, they would interleave with the benchmark lines) and
// reported by the benchmark when it ends; Fatalf panics, since Pebble
// expects it not to return.
type quietLogger struct {
	mu   sync.Mutex
	errs []string
}

func (*quietLogger) Infof(string, ...any) {}

func (l *quietLogger) Errorf(format string, args ...any) {
	l.mu.Lock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (*quietLogger) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Errors returns what Pebble logged as errors so far.
func (l *quietLogger) Errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}
