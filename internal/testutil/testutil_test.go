package testutil

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// recorder is a testing.TB whose Fatal ends only the goroutine it runs in,
// so a test can see whether a helper fails.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.fail(fmt.Sprint(args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
}
func (r *recorder) fail(msg string) {
	r.mu.Lock()
	r.failed = msg
	r.mu.Unlock()
	runtime.Goexit()
}

// fails runs fn with a recorder and returns its failure message, "" if none.
func fails(fn func(tb testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func TestWantCode(t *testing.T) {
	coded := errs.New(errs.CodeInvalidInput, "bad key")
	wrapped := fmt.Errorf("append: %w", coded)
	if msg := fails(func(tb testing.TB) {
		if got := WantCode(tb, wrapped, errs.CodeInvalidInput); got != coded {
			tb.Fatalf("returned %v, want the wrapped error", got)
		}
	}); msg != "" {
		t.Fatalf("a wrapped error of the code failed: %s", msg)
	}
	for name, err := range map[string]error{
		"nil":        nil,
		"plain":      fmt.Errorf("plain"),
		"other code": errs.New(errs.CodeWriteFailed, "disk"),
	} {
		if msg := fails(func(tb testing.TB) { WantCode(tb, err, errs.CodeInvalidInput) }); msg == "" {
			t.Errorf("%s error passed as %s", name, errs.CodeInvalidInput)
		}
	}
}

func TestWriteFileIsDurable(t *testing.T) {
	mem := vfs.NewCrashableMem()
	data := []byte("hello")
	WriteFile(mem, "a/b/f", data)
	data[0] = 'j' // the caller's buffer is its own again
	clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	got, err := ReadFile(clone, "a/b/f")
	if err != nil || string(got) != "hello" {
		t.Fatalf("after a crash: %q, %v; want hello", got, err)
	}
	WriteFile(mem, "a/b/f", []byte("hi"))
	if got, err := ReadFile(mem, "a/b/f"); err != nil || string(got) != "hi" {
		t.Fatalf("rewritten: %q, %v; want hi", got, err)
	}
	if _, err := ReadFile(mem, "a/missing"); err == nil {
		t.Fatal("reading a missing file succeeded")
	}
}

func TestTreesCopyAndCompare(t *testing.T) {
	from := vfs.NewMem()
	WriteFile(from, "db/x", []byte("12345"))
	WriteFile(from, "db/sub/y", []byte("1"))
	if err := from.MkdirAll("db/empty", 0o755); err != nil {
		t.Fatal(err)
	}
	to := vfs.NewMem()
	if err := CopyTree(from, "db", to, "copy"); err != nil {
		t.Fatal(err)
	}
	a, b := Tree(t, from, "db"), Tree(t, to, "copy")
	if len(a) != 4 {
		t.Fatalf("tree of db: %v; want two files and three directories", a)
	}
	rebased := map[string]int64{}
	for p, s := range b {
		rebased["db"+p[len("copy"):]] = s
	}
	if d := DiffTrees(a, rebased); d != "" {
		t.Fatalf("copy differs:\n%s", d)
	}
	WriteFile(to, "copy/x", []byte("1"))
	WriteFile(to, "copy/z", nil)
	if err := to.Remove("copy/sub/y"); err != nil {
		t.Fatal(err)
	}
	want := "+copy/z\n-copy/sub/y\n~copy/x 5→1"
	if d := DiffTrees(b, Tree(t, to, "copy")); d != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", d, want)
	}
}

func TestSegmentFilesInOrder(t *testing.T) {
	fs := vfs.NewMem()
	dir := segment.AnchorDir(fs, "db", "a/1")
	for _, n := range []string{segment.FileName(10), segment.FileName(2), "junk", segment.FileName(1) + ".cut"} {
		WriteFile(fs, fs.PathJoin(dir, n), nil)
	}
	got := SegmentFiles(t, fs, "db", "a/1")
	want := []string{fs.PathJoin(dir, segment.FileName(2)), fs.PathJoin(dir, segment.FileName(10))}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestLockOrderedLocksAndUnwraps(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fs := LockOrdered(mem)
	l, err := fs.Lock("LOCK")
	if err != nil {
		t.Fatal(err)
	}
	clone := CrashClone(mem, vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
	if _, err := clone.Stat("LOCK"); err != nil {
		t.Fatalf("the clone lacks the lock file: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if u, ok := fs.(interface{ Unwrap() vfs.FS }); !ok || u.Unwrap() != mem {
		t.Fatal("LockOrdered does not unwrap to the MemFS")
	}
}

func TestRaceStride(t *testing.T) {
	want := 1
	if RaceEnabled {
		want = 7
	}
	if got := RaceStride(7); got != want {
		t.Fatalf("RaceStride(7) = %d with RaceEnabled %v", got, RaceEnabled)
	}
}

// WaitFor returns once the condition holds, having asked until it did.
func TestWaitForPollsUntilTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
			runtime.Gosched()
		}
	}()
	calls := 0
	WaitFor(t, "three increments", func() bool { calls++; return n.Load() == 3 })
	if calls < 1 || n.Load() != 3 {
		t.Fatalf("WaitFor returned after %d calls with %d increments", calls, n.Load())
	}
}
