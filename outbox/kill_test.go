//go:build unix

package outbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"
)

// Real process kills. The test binary re-executes itself as a child that
// opens a database on the real filesystem, enqueues entries 0..n-1 (a
// retry of the batch after a restart is a duplicate) and delivers them
// with Run to a recording sink — a file the handler appends each id to
// before it returns — failing some attempts on purpose: a transient error
// or a permanent one, decided per (id, attempt). The parent SIGKILLs the
// child at random moments several times, then lets a last one finish.
// Then: every id is done or dead, the sink holds every done id at least
// once (delivery is at least once), no id was completed twice in the log
// (completion is at most once), and the database and the outbox verify.

const killEnv = "ANCHORDB_OUTBOX_KILL_CHILD" // dir,sink,n

func killOptions() engine.Options {
	return engine.Options{FS: vfs.Default, SegmentSize: 64 << 10, SettleBytes: 256 << 10, SettleInterval: 100 * time.Millisecond}
}

var killPolicy = Policy{Version: "v1", MaxAttempts: 4, Backoff: Backoff{BaseMS: 1, Multiplier: 2, CapMS: 20}, Jitter: 0.5}

// killFate decides attempt a of entry id: 0 deliver, 1 a transient
// failure, 2 a permanent one.
func killFate(id string, a int) int {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(a))
	h := blake3.Sum256(append([]byte(id), n[:]...))
	switch x := h[0] % 100; {
	case x < 3:
		return 2
	case x < 15:
		return 1
	}
	return 0
}

func killID(i int) string { return fmt.Sprintf("k%05d", i) }

func killChild(spec string) {
	parts := strings.Split(spec, ",")
	dir, sinkPath := parts[0], parts[1]
	n, _ := strconv.Atoi(parts[2])
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	db, err := engine.Open(dir, killOptions())
	if err != nil {
		fail(err)
	}
	ob, err := Open(ctx, db, "kill", Options{Policy: killPolicy, FlushEntries: 64, FlushInterval: 20 * time.Millisecond})
	if err != nil {
		fail(err)
	}
	for i := 0; i < n; i += 100 {
		var ms []Message
		for j := i; j < min(i+100, n); j++ {
			ms = append(ms, Message{ID: killID(j), Payload: []byte(killID(j))})
		}
		// After a restart the batch is a retry: its dead entries refuse
		// it (a dead promise is never retried by itself), so those batches
		// go one message at a time.
		_, err := ob.EnqueueBatch(ctx, ms)
		var se *StateError
		if errors.As(err, &se) && se.State() == StateDead {
			for _, m := range ms {
				if _, err := ob.Enqueue(ctx, m); err != nil && !(errors.As(err, &se) && se.State() == StateDead) {
					fail(err)
				}
			}
		} else if err != nil {
			fail(err)
		}
	}
	sink, err := os.OpenFile(sinkPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ob.Run(runCtx, func(_ context.Context, e Entry) ([]byte, error) {
			switch killFate(e.ID, e.Attempts) {
			case 1:
				return nil, errors.New("transient")
			case 2:
				return nil, Permanent(errors.New("permanent"))
			}
			// The delivery: it reaches the OS before the handler returns,
			// so a kill after it cannot lose it. It takes a while, so that
			// the kills come in the middle of deliveries.
			time.Sleep(5 * time.Millisecond)
			if _, err := sink.Write([]byte(e.ID + "\n")); err != nil {
				return nil, err
			}
			return []byte("delivered"), nil
		}, RunOptions{Workers: 4, Batch: 16, LeaseTTL: 300 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	}()
	for {
		st, err := ob.Stats(ctx)
		if err != nil {
			fail(err)
		}
		if st.Done+st.Dead == int64(n) {
			break
		}
		select {
		case err := <-done:
			fail(fmt.Errorf("Run ended early: %v", err))
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		fail(err)
	}
	if err := ob.Close(); err != nil {
		fail(err)
	}
	if err := db.Close(); err != nil {
		fail(err)
	}
	os.Exit(0)
}

func TestKillDuringDelivery(t *testing.T) {
	if spec := os.Getenv(killEnv); spec != "" {
		killChild(spec)
		return
	}
	n, kills := 2000, 5
	if testing.Short() {
		n, kills = 500, 2
	}
	dir := t.TempDir()
	db, sink := filepath.Join(dir, "db"), filepath.Join(dir, "sink")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	start := func() (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringDelivery$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d", killEnv, db, sink, n))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &stderr
	}
	for k := 0; k < kills; k++ {
		cmd, stderr := start()
		time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			t.Fatalf("child %d failed before the kill: %s", k, stderr)
		}
		if b, err := os.ReadFile(sink); err == nil {
			t.Logf("kill %d: the sink has %d deliveries", k, bytes.Count(b, []byte("\n")))
		}
	}
	cmd, stderr := start()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("the last child: %v\n%s", err, stderr)
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the last child did not finish:\n%s", stderr)
	}

	// What the sink saw.
	f, err := os.Open(sink)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		seen[sc.Text()]++
	}
	f.Close()

	ctx := context.Background()
	d, err := engine.Open(db, killOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ob, err := Open(ctx, d, "kill", Options{Policy: killPolicy, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	var done, dead, redelivered, reclaimed int
	for i := 0; i < n; i++ {
		id := killID(i)
		in, err := ob.Inspect(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		completes := 0
		for _, tr := range in.Transitions {
			if tr.Op == opComplete {
				completes++
			}
			if tr.Op == opClaim && tr.From == StateInflight {
				reclaimed++
			}
		}
		if completes > 1 {
			t.Errorf("%s was completed %d times", id, completes)
		}
		switch e := in.Entry; e.State {
		case StateDone:
			done++
			if seen[id] == 0 {
				t.Errorf("%s is done but the sink never saw it", id)
			}
			if seen[id] > 1 {
				redelivered++
			}
			if completes != 1 {
				t.Errorf("%s is done with %d completions", id, completes)
			}
		case StateDead:
			dead++
			if e.LastError == nil {
				t.Errorf("%s is dead without a last error", id)
			}
		default:
			t.Errorf("%s is %s, want done or dead", id, e.State)
		}
	}
	// (The sink may also hold ids that ended dead: delivered once, then
	// killed before the completion was recorded, then failed on a later
	// attempt. At least once is not exactly once.)
	for id := range seen {
		if e, found, err := ob.Get(ctx, id); err != nil || !found {
			t.Errorf("the sink saw %s, which the outbox does not hold: %v", id, err)
		} else if e.State != StateDone && e.State != StateDead {
			t.Errorf("the sink saw %s, which is %s", id, e.State)
		}
	}
	t.Logf("%d done (%d delivered more than once), %d dead, %d claims of expired leases, after %d kills", done, redelivered, dead, reclaimed, kills)
	rep, err := d.Verify(ctx, engine.VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep.Failures)
	}
	orep, err := Verify(ctx, d, "kill")
	if err != nil || !orep.OK {
		t.Fatalf("outbox verify: %v %+v", err, orep.Failures)
	}
}
