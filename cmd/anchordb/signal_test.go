package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startIdle starts the binary with args and stdin, waits until it has run
// for a moment (blocked on its idle input), sends SIGINT and returns the
// result, failing if the process does not end within a few seconds.
func startIdle(t *testing.T, stdin *os.File, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{stdout: out.String(), stderr: errb.String(), code: code}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v: still running 5 s after SIGINT, its input idle\nstdout: %s\nstderr: %s", args, out.String(), errb.String())
		return result{}
	}
}

// TestInterruptWhileReadingInput: SIGINT ends a command blocked on an idle
// stdin, pipe or FIFO promptly, with the exit status of an interrupted
// command (2, IO_001 "interrupted"), and nothing is appended, also when the
// input later closes.
func TestInterruptWhileReadingInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	mustRun(t, "--dir", dir, "put", "seed", "k", "v")
	records := func() int64 {
		return num(t, obj(t, mustRun(t, "--dir", dir, "--json", "stats").stdout), "records")
	}

	// append with its payload on an idle pipe.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.WriteString("part of a payload"); err != nil {
		t.Fatal(err)
	}
	r := startIdle(t, pr, "--dir", dir, "--json", "append", "a", "--type", "T")
	pw.Close()
	pr.Close()
	wantExit(t, r, 2)
	errObj(t, r, "IO_001")

	// import from stdin, one line sent and then nothing.
	pr, pw, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.WriteString(`{"anchor":"s","key":"a","value":"1"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	r = startIdle(t, pr, "--dir", dir, "--json", "import", "--batch", "1", "-")
	pw.Close()
	pr.Close()
	wantExit(t, r, 2)
	errObj(t, r, "IO_001")

	// import from a FIFO whose writer idles.
	fifo := filepath.Join(t.TempDir(), "f")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	opened := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, _ = w.WriteString(`{"anchor":"s","key":"a","value":"1"}` + "\n")
		}
		opened <- w
	}()
	r = startIdle(t, nil, "--dir", dir, "--json", "import", "--batch", "1", fifo)
	if w := <-opened; w != nil {
		w.Close()
	}
	wantExit(t, r, 2)
	errObj(t, r, "IO_001")

	// A FIFO nobody opens for writing: the open itself is interrupted.
	fifo2 := filepath.Join(t.TempDir(), "f2")
	if err := syscall.Mkfifo(fifo2, 0o600); err != nil {
		t.Fatal(err)
	}
	r = startIdle(t, nil, "--dir", dir, "--json", "import", fifo2)
	wantExit(t, r, 2)

	time.Sleep(200 * time.Millisecond) // let any late append show
	if n := records(); n != 1 {
		t.Fatalf("%d records after the interrupted commands, want the 1 seed", n)
	}
}

// TestInterruptWhileReadingKeyFile: a --key or --pub naming a FIFO whose
// writer never comes must not make the command deaf to SIGINT (it catches
// the signal to close the database cleanly, so a read that ignores the
// context would leave only SIGKILL), and a key file that never ends, such as
// /dev/zero, is refused with INPUT_001 instead of being read into memory
// without bound.
func TestInterruptWhileReadingKeyFile(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	mustRun(t, "--dir", dir, "put", "a", "k", "v")
	k := filepath.Join(tmp, "k")
	mustRun(t, "keygen", "--out", k)
	note := filepath.Join(tmp, "cp.note")
	if err := os.WriteFile(note, []byte(mustRun(t, "--dir", dir, "checkpoint", "create", "--key", k+".key").stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(tmp, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, args := range [][]string{
		{"--dir", dir, "--json", "checkpoint", "create", "--key", fifo},
		{"--json", "checkpoint", "verify", note, "--pub", fifo},
		{"--dir", dir, "--json", "verify", "--pub", fifo},
	} {
		r := startIdle(t, nil, args...)
		wantExit(t, r, 2)
		errObj(t, r, "IO_001")
	}
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	// Bounded by a timeout: before the fix this read grows without end.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--json", "checkpoint", "verify", note, "--pub", "/dev/zero")
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatal("checkpoint verify --pub /dev/zero still reading after 20 s")
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	r := result{stdout: out.String(), code: code}
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
}

// runWithin runs the binary with args and no stdin, failing if it has not
// ended within d (the process is then killed).
func runWithin(t *testing.T, d time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after %v\nstdout: %s\nstderr: %s", args, d, out.String(), errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// TestSnapshotVerifyNotARegularFile: snapshot verify PATH hands the path to
// the engine, whose open of a FIFO blocks with no context (SIGINT caught,
// the database lock held) and which would read a device such as /dev/zero
// as a snapshot. A snapshot is a regular file: anything else is INPUT_001.
func TestSnapshotVerifyNotARegularFile(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "db")
	mustRun(t, "--dir", dir, "put", "a", "k", "v")
	fifo := filepath.Join(tmp, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	paths := []string{fifo}
	if _, err := os.Stat("/dev/zero"); err == nil {
		paths = append(paths, "/dev/zero")
	}
	for _, p := range paths {
		r := runWithin(t, 10*time.Second, "--dir", dir, "--json", "snapshot", "verify", p)
		wantExit(t, r, 2)
		errObj(t, r, "INPUT_001")
	}
}

// signalHelperEnv, set in a child's environment, makes the test binary run
// signalHelper instead of the tests: the signal handling of main, with the
// command stuck where no context reaches it.
const signalHelperEnv = "ANCHORDB_SIGNAL_HELPER"

// signalHelper installs main's signal handling, says "ready", and after the
// first signal says "cancelled" and blocks in the open of the FIFO at
// fifo, which no writer opens: as Open did on a FIFO in the database's own
// tree before that was fixed, and as any system call no context reaches
// would.
func signalHelper(fifo string) {
	ctx, stop := interruptContext(os.Stderr)
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("cancelled")
	f, err := os.Open(fifo)
	if err == nil {
		f.Close()
	}
	fmt.Println("the open returned")
	os.Exit(0)
}

// TestSecondSignalExitsAtOnce: the first SIGINT or SIGTERM cancels the
// command's context (it closes the database and exits cleanly); a second
// one while the first is being handled ends the process at once, with exit
// status 2 and a line on stderr that says so, even with the command stuck
// in a system call (here the open of a FIFO) that the first could not end.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	for _, sigs := range [][2]syscall.Signal{
		{syscall.SIGINT, syscall.SIGINT},
		{syscall.SIGTERM, syscall.SIGTERM},
		{syscall.SIGINT, syscall.SIGTERM},
	} {
		name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}
		t.Run(name[sigs[0]]+"+"+name[sigs[1]], func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "fifo")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), signalHelperEnv+"="+fifo)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			lines := bufio.NewScanner(stdout)
			expect := func(want string) {
				t.Helper()
				if !lines.Scan() || lines.Text() != want {
					_ = cmd.Process.Kill()
					t.Fatalf("child said %q (%v); want %q\nstderr: %s", lines.Text(), lines.Err(), want, errb.String())
				}
			}
			expect("ready")
			if err := cmd.Process.Signal(sigs[0]); err != nil {
				t.Fatal(err)
			}
			expect("cancelled")
			go func() {
				for lines.Scan() {
				}
				done <- cmd.Wait()
			}()
			select {
			case err := <-done:
				t.Fatalf("the child ended after one signal, stuck as it was: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := cmd.Process.Signal(sigs[1]); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 2 {
					t.Fatalf("exit %v; want status 2\nstderr: %s", err, errb.String())
				}
				want := "anchordb: second " + name[sigs[1]] + ": exiting at once"
				if !strings.Contains(errb.String(), want) {
					t.Fatalf("stderr %q; want %q", errb.String(), want)
				}
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("still running 5 s after the second signal\nstderr: %s", errb.String())
			}
		})
	}
}
