//go:build unix

package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Real process kills. The test binary re-executes itself as a child that
// opens a database in a temporary directory on the real filesystem and
// appends from several goroutines to many anchors — plain puts, puts with
// idempotency keys and their retries, events and batches — printing each
// receipt as a JSON line only after Append has returned. The parent reads the
// lines, SIGKILLs the child at a random moment (10–300 ms after starting it:
// sometimes during its own recovery), reopens the database and checks that
// every printed receipt is there with its hash, that checkDB passes, and that
// the database takes new writes. The rounds share one directory, so each
// child recovers from the previous kill. One round runs with NoSync: a
// process kill must lose nothing acknowledged there either (the frames have
// reached the OS).

const killEnv = "ANCHORDB_TEST_KILL_CHILD" // dir,mode,round

// perDir is how many kill rounds share a directory, each child recovering
// from the previous kill.
const perDir = 5

func killOptions(noSync bool) Options {
	// Small segments and settle thresholds: a few hundred milliseconds of
	// appends seal segments and settle the journal many times.
	return Options{FS: vfs.Default, NoSync: noSync, SegmentSize: 16 << 10, SettleBytes: 64 << 10, SettleInterval: 50 * time.Millisecond}
}

func TestKillRecovery(t *testing.T) {
	if spec := os.Getenv(killEnv); spec != "" {
		killChild(spec)
		return
	}
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("ANCHORDB_KILL_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (set ANCHORDB_KILL_SEED to repeat the delays)", seed)
	rng := newRand(seed)
	ctx := context.Background()
	var dir string
	var acked []ackedEntry
	total := 0
	began := time.Now()
	for round := 0; round < rounds; round++ {
		if round%perDir == 0 {
			// A fresh directory now and then keeps each check quick.
			dir, acked = t.TempDir(), nil
		}
		noSync := round%perDir == perDir-2 // one round in each directory
		mode := "sync"
		if noSync {
			mode = "nosync"
		}
		delay := time.Duration(10+rng.IntN(291)) * time.Millisecond
		// Odd rounds count the delay from the child's first receipt, so a
		// machine slow to start processes still kills children mid-write;
		// even rounds count it from the start, so some kills land in Open
		// and recovery.
		receipts, stderr := runKilledChild(t, dir, mode, round, delay, round%2 == 1)
		total += len(receipts)
		t.Logf("round %d (%s): killed after %v with %d receipts printed", round, mode, delay, len(receipts))
		for _, r := range receipts {
			acked = append(acked, ackedEntry{Receipt: r})
		}

		db, err := Open(dir, killOptions(false))
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v\nchild stderr:\n%s", round, err, stderr)
		}
		for _, ev := range db.RecoveryReport().Events {
			if ev.Kind == EventDamaged {
				t.Errorf("round %d: recovery after a process kill found damage: %v", round, ev)
			}
		}
		checkDB(t, db, acked)
		// Duplicates name the original record: same seq, same hash.
		for _, r := range receipts {
			if !r.Duplicate {
				continue
			}
			rec, err := db.Record(ctx, r.Anchor, r.Seq)
			if err != nil || rec.Hash != r.Hash || len(rec.IdempotencyKey) == 0 {
				t.Fatalf("round %d: duplicate receipt %+v does not name an idempotent record: %v %v", round, r, rec.Hash, err)
			}
		}
		e := Entry{Anchor: "after-kill", Type: segment.TypePut, Key: []byte("round"), Value: []byte(strconv.Itoa(round))}
		r, err := db.Append(ctx, e)
		if err != nil {
			t.Fatalf("round %d: the recovered database refuses writes: %v", round, err)
		}
		acked = append(acked, ackedEntry{Receipt: r, Entry: e})
		if err := db.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
	}
	if total == 0 {
		t.Fatalf("no child printed a receipt in %d rounds: the test tested nothing", rounds)
	}
	t.Logf("%d rounds, %d receipts, %v", rounds, total, time.Since(began).Round(time.Millisecond))
}

// runKilledChild starts a child appending to dir, SIGKILLs it after delay
// (counted from its first receipt when afterFirst is set) and returns the
// receipts it printed in whole lines.
func runKilledChild(t *testing.T, dir, mode string, round int, delay time.Duration, afterFirst bool) ([]Receipt, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillRecovery$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d", killEnv, dir, mode, round))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var receipts []Receipt
	var parseErr error
	done := make(chan struct{})
	first := make(chan struct{})
	var firstOnce sync.Once
	go func() {
		defer close(done)
		br := bufio.NewReader(stdout)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				// A line cut by the kill has no newline: it was never
				// wholly printed, so it acknowledges nothing.
				if err != io.EOF && parseErr == nil {
					parseErr = err
				}
				return
			}
			if !strings.HasPrefix(line, "{") {
				continue // the test framework's own output
			}
			var r Receipt
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				if parseErr == nil {
					parseErr = fmt.Errorf("receipt line %q: %v", line, err)
				}
				continue
			}
			receipts = append(receipts, r)
			firstOnce.Do(func() { close(first) })
		}
	}()
	if afterFirst {
		select {
		case <-first:
		case <-done:
		case <-time.After(time.Minute):
		}
	}
	time.Sleep(delay)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	werr := cmd.Wait()
	if parseErr != nil {
		t.Fatalf("round %d: %v", round, parseErr)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		// The child ended on its own: it failed before the kill.
		t.Fatalf("round %d: the child exited before it was killed (%v):\n%s", round, werr, stderr.String())
	}
	return receipts, stderr.String()
}

// killChild is the child: it appends until it is killed.
func killChild(spec string) {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "bad %s=%q\n", killEnv, spec)
		os.Exit(3)
	}
	dir, mode, round := parts[0], parts[1], parts[2]
	db, err := Open(dir, killOptions(mode == "nosync"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "child open: %v\n", err)
		os.Exit(3)
	}
	ctx := context.Background()
	var outMu sync.Mutex
	emit := func(rs ...Receipt) {
		outMu.Lock()
		defer outMu.Unlock()
		for _, r := range rs {
			b, _ := json.Marshal(r)
			// One write per line: a kill can cut the line, never
			// interleave two.
			if _, err := os.Stdout.Write(append(b, '\n')); err != nil {
				os.Exit(4)
			}
		}
	}
	fatal := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(5)
	}
	const writers = 6
	for w := 0; w < writers; w++ {
		go func(w int) {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := 0; ; i++ {
				an := fmt.Sprintf("kill-%d", rng.IntN(40))
				if i%9 == 0 {
					an = fmt.Sprintf("k/%d/é", rng.IntN(5))
				}
				key := []byte(fmt.Sprintf("key-%d", rng.IntN(200)))
				val := make([]byte, 20+rng.IntN(400))
				for j := range val {
					val[j] = byte('a' + rng.IntN(26))
				}
				switch i % 5 {
				case 0, 1:
					r, err := db.Put(ctx, an, key, val)
					if err != nil {
						fatal("put: %v", err)
					}
					emit(r)
				case 2:
					e := Entry{Anchor: an, Type: segment.TypePut, Key: key, Value: val,
						IdempotencyKey: []byte(fmt.Sprintf("r%s-w%d-%d", round, w, i))}
					r, err := db.Append(ctx, e)
					if err != nil {
						fatal("idempotent put: %v", err)
					}
					emit(r)
					r2, err := db.Append(ctx, e)
					if err != nil {
						fatal("retry: %v", err)
					}
					if !r2.Duplicate || r2.Seq != r.Seq || r2.Hash != r.Hash {
						fatal("retry of %s: %+v, want a duplicate of %+v", e.IdempotencyKey, r2, r)
					}
					emit(r2)
				case 3:
					e := Entry{Anchor: an, Type: "SENSOR", Value: val}
					r, err := db.Append(ctx, e)
					if err != nil {
						fatal("event: %v", err)
					}
					emit(r)
				case 4:
					es := []Entry{
						{Anchor: an, Type: segment.TypePut, Key: key, Value: val},
						{Anchor: fmt.Sprintf("kill-%d", rng.IntN(40)), Type: segment.TypeDelete, Key: key},
						{Anchor: fmt.Sprintf("kill-%d", rng.IntN(40)), Type: "SENSOR", Value: val[:10]},
					}
					rs, err := db.AppendBatch(ctx, es)
					if err != nil {
						fatal("batch: %v", err)
					}
					emit(rs...)
				}
			}
		}(w)
	}
	select {} // until killed
}
