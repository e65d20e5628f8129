package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
	"golang.org/x/sys/unix"
)

// BenchmarkRecovery: the time Open takes after the process that wrote a
// database was SIGKILLed with a fixed tail in its journal, over a small and
// a large database (1M and 10M records over 16 anchors; -anchordb.small:
// 20,000 and 200,000). Open replays the tail from the journal into the
// segments and the index; it should cost what the tail costs, not what the
// database holds, so the two times should be close (the target: the large
// within 20 % of the small).
//
// Each op, for the small base and then the large: the base (built once, a
// closed and settled database) is cloned — its immutable files hard-linked,
// the rest copied and synced — a child process (this test binary, in
// child mode) opens the clone, appends the tail in durable batches of
// 1,000 and reports it is done, and is killed with SIGKILL; then the clock
// runs over engine.Open alone. The reported metrics are each Open's time
// and their ratio, the pair measured in one run.
func BenchmarkRecovery(b *testing.B) {
	smallN, largeN := sized(1_000_000, 20_000), sized(10_000_000, 200_000)
	tail := recoveryTail()
	bases := []struct {
		n   int
		dir string
		sum time.Duration
	}{{n: smallN}, {n: largeN}}
	for i := range bases {
		dir, err := recoveryBases.get(bases[i].n, buildRecoveryBase)
		if err != nil {
			b.Fatal(err)
		}
		bases[i].dir = dir
	}
	b.ResetTimer()
	b.StopTimer()
	for op := 0; op < b.N; op++ {
		for i := range bases {
			d, err := recoverOnce(bases[i].dir, bases[i].n, tail, b.StartTimer, b.StopTimer)
			if err != nil {
				b.Fatal(err)
			}
			bases[i].sum += d
		}
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N) }
	b.ReportMetric(ms(bases[0].sum), "small-open-ms")
	b.ReportMetric(ms(bases[1].sum), "large-open-ms")
	b.ReportMetric(bases[1].sum.Seconds()/bases[0].sum.Seconds(), "large/small")
	b.ReportMetric(float64(tail), "tail-records")
}

// recoveryTail is the records the child leaves in the journal.
func recoveryTail() int { return sized(100_000, 2_000) }

// recoveryAnchors spreads the recovery databases' records.
const recoveryAnchors = 16

var recoveryBases onceBySize[string]

func buildRecoveryBase(n int) (string, error) {
	return keptFixture(fmt.Sprintf("recovery-%d", n), func(dir string) error {
		return loadEngine(dir, n, recoveryAnchors)
	})
}

// recoverOnce clones base, has a child append tail records to the clone
// and kills it, then times engine.Open of the clone (calling start and
// stop around it: the benchmark's timer). It checks that the reopened
// database holds the tail and that the clone left the base as it was.
func recoverOnce(base string, n, tail int, start, stop func()) (time.Duration, error) {
	work, err := os.MkdirTemp(filepath.Dir(base), "recovery-work-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	shared, err := cloneDB(base, work)
	if err != nil {
		return 0, fmt.Errorf("clone: %w", err)
	}
	if err := killedTail(work, n, tail); err != nil {
		return 0, err
	}
	start()
	t0 := time.Now()
	db, err := engine.Open(work, engine.Options{})
	d := time.Since(t0)
	stop()
	if err != nil {
		return 0, fmt.Errorf("open after kill: %w", err)
	}
	if rep := db.RecoveryReport(); rep.Clean || rep.Rebuilt {
		_ = db.Close()
		return 0, fmt.Errorf("open after kill: clean %v, rebuilt %v: not the recovery measured", rep.Clean, rep.Rebuilt)
	}
	var total uint64
	for a, err := range db.Anchors(context.Background()) {
		if err != nil {
			_ = db.Close()
			return 0, err
		}
		total += a.Records
	}
	if err := db.Close(); err != nil {
		return 0, err
	}
	if total != uint64(n+tail) {
		return 0, fmt.Errorf("recovered %d records, want %d", total, n+tail)
	}
	for path, size := range shared {
		info, err := os.Stat(path)
		if err != nil || info.Size() != size {
			return 0, fmt.Errorf("the base's %s changed under a clone (%v): the clone must not share it", path, err)
		}
	}
	return d, nil
}

// cloneDB makes dst a copy of the closed database src: files that are
// never written again once complete — the index's tables, and every
// segment but the newest of its anchor (sealed: docs/FORMAT.md) — are
// hard-linked; the rest are copied. Everything is synced (syncfs) before
// it returns, so no writeback of the copy runs during the measurement. It
// returns the shared files and their sizes, for the check that they stay
// unchanged.
func cloneDB(src, dst string) (map[string]int64, error) {
	newest := map[string]string{} // directory → its highest-numbered segment
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if n, ok := segment.ParseFileName(d.Name()); ok {
			dir := filepath.Dir(p)
			if cur, seen := newest[dir]; !seen {
				newest[dir] = p
			} else if m, _ := segment.ParseFileName(filepath.Base(cur)); n > m {
				newest[dir] = p
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	shared := map[string]int64{}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if d.Name() == fixtureDone {
			return nil
		}
		_, isSeg := segment.ParseFileName(d.Name())
		immutable := (isSeg && newest[filepath.Dir(p)] != p) ||
			(strings.HasSuffix(d.Name(), ".sst") && filepath.Base(filepath.Dir(p)) == engine.IndexDir)
		if immutable {
			info, err := d.Info()
			if err != nil {
				return err
			}
			shared[p] = info.Size()
			return os.Link(p, to)
		}
		return copyFile(p, to)
	})
	if err != nil {
		return nil, err
	}
	f, err := os.Open(dst)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return shared, unix.Syncfs(int(f.Fd()))
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// The child mode of the test binary (TestMain runs it before anything
// else): it appends a tail to a database and waits to be killed.
const (
	childEnv     = "ANCHORDB_BENCH_CHILD"
	childDirEnv  = "ANCHORDB_BENCH_CHILD_DIR"
	childFromEnv = "ANCHORDB_BENCH_CHILD_FROM"
	childTailEnv = "ANCHORDB_BENCH_CHILD_TAIL"
	childReady   = "tail appended"
)

// killedTail runs the child on dir, waits until it has appended records
// from … from+tail-1 durably, and SIGKILLs it.
func killedTail(dir string, from, tail int) error {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"=recovery-tail", childDirEnv+"="+dir,
		childFromEnv+"="+strconv.Itoa(from), childTailEnv+"="+strconv.Itoa(tail))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != childReady {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("child: %q, %v: %s", line, err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	err = cmd.Wait()
	if ws, ok := exitStatus(err); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return nil
	}
	return fmt.Errorf("child did not die of SIGKILL: %v", err)
}

// exitStatus is the wait status of a process that exited with err.
func exitStatus(err error) (syscall.WaitStatus, bool) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ws, ok
}

// runChild is the child's work, when the environment asks for it; it
// reports whether it ran (it never returns when it did: it waits to be
// killed, or exits on an error).
func runChild() bool {
	if os.Getenv(childEnv) != "recovery-tail" {
		return false
	}
	from, err1 := strconv.Atoi(os.Getenv(childFromEnv))
	tail, err2 := strconv.Atoi(os.Getenv(childTailEnv))
	if err := errors.Join(err1, err2, appendTail(os.Getenv(childDirEnv), from, tail)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(childReady)
	for {
		time.Sleep(time.Hour)
	}
}

// appendTail opens dir and appends records from … from+tail-1 in durable
// batches of loadBatch over the recovery anchors, round-robin, leaving them
// in the journal: no settle runs (the tail stays below the settle size and
// the settle interval is an hour), so nothing of it reaches the segments'
// fsync or the index's tables before the kill.
func appendTail(dir string, from, tail int) error {
	db, err := engine.Open(dir, engine.Options{SettleInterval: time.Hour})
	if err != nil {
		return err
	}
	ids := AnchorIDs(recoveryAnchors)
	ctx := context.Background()
	bufs := make([]kvBuf, loadBatch)
	entries := make([]engine.Entry, 0, loadBatch)
	for start, batch := from, 0; start < from+tail; start, batch = start+loadBatch, batch+1 {
		entries = entries[:0]
		for i := start; i < min(start+loadBatch, from+tail); i++ {
			k, v := bufs[i-start].kv(uint64(i))
			entries = append(entries, engine.Entry{Anchor: ids[batch%recoveryAnchors], Type: segment.TypePut, Key: k, Value: v})
		}
		if _, err := db.AppendBatch(ctx, entries); err != nil {
			return err
		}
	}
	if m := db.Metrics(); m.Settles > 0 {
		return fmt.Errorf("a settle ran during the tail (%d): the tail is not in the journal", m.Settles)
	}
	return nil
}
