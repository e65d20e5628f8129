package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble ends the process when a MANIFEST write fails on one of its own
// background goroutines (a flush): nothing in the engine can recover that
// panic, as with Pebble's default logger. The engine marks itself failed
// first. In the injection loops that run in a child process, the fatal hook
// saves what a restart and a power loss at that moment would find — the
// filesystem states and the acknowledged receipts — to a real directory and
// prints its name; the supervising parent then reopens both and checks them
// like any other iteration (verifyFatalStates).

const fatalMarker = "@@fatal-saved "

// fatalSaver returns the hook for one injected run.
func fatalSaver(ffs *faultFS, acks *ackLog, noSync bool, seed uint64) func(string) {
	return func(msg string) {
		dir, err := os.MkdirTemp("", "anchordb-fatal-")
		if err != nil {
			return
		}
		for _, st := range []struct {
			name string
			pct  int
		}{{"restart", 100}, {"power", 0}} {
			if err := testutil.CopyTree(ffs.crashState(st.pct, seed), "", vfs.Default, filepath.Join(dir, st.name)); err != nil {
				return
			}
		}
		acked := acks.snapshot()
		b, err := json.Marshal(acked)
		if err != nil || os.WriteFile(filepath.Join(dir, "acked.json"), b, 0o644) != nil {
			return
		}
		savedFatal.Lock()
		savedFatal.dirs = append(savedFatal.dirs, dir)
		savedFatal.Unlock()
		fmt.Printf("%s%s %v %q\n", fatalMarker, dir, noSync, msg)
	}
}

// savedFatal holds the directories fatalSaver made in this process; an
// iteration the process survived removes them (cleanupFatalDirs).
var savedFatal struct {
	sync.Mutex
	dirs []string
}

func cleanupFatalDirs() {
	savedFatal.Lock()
	defer savedFatal.Unlock()
	for _, d := range savedFatal.dirs {
		_ = os.RemoveAll(d)
	}
	savedFatal.dirs = nil
}

// ackLogOf makes an ack log holding acked.
func ackLogOf(acked []ackedEntry) *ackLog {
	l := &ackLog{}
	l.receipts = append(l.receipts, acked...)
	return l
}

// verifyFatalStates checks the states a child saved at a Pebble fatal. It
// reports whether output held such a marker.
func verifyFatalStates(t *testing.T, output string) bool {
	t.Helper()
	// The last states saved are the ones nearest the crash; the earlier
	// ones are removed.
	var markers []string
	for _, line := range strings.Split(output, "\n") {
		if rest, ok := strings.CutPrefix(line, fatalMarker); ok {
			markers = append(markers, rest)
		}
	}
	for i, rest := range markers {
		if i < len(markers)-1 {
			if f := strings.Fields(rest); len(f) > 0 {
				_ = os.RemoveAll(f[0])
			}
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			t.Fatalf("malformed fatal marker %q", rest)
		}
		dir, noSync := f[0], f[1] == "true"
		defer os.RemoveAll(dir)
		b, err := os.ReadFile(filepath.Join(dir, "acked.json"))
		if err != nil {
			t.Fatal(err)
		}
		var acked []ackedEntry
		if err := json.Unmarshal(b, &acked); err != nil {
			t.Fatal(err)
		}
		checkReopen(t, "restart after a Pebble fatal", vfs.Default, noSync, acked, filepath.Join(dir, "restart", "db"))
		if noSync {
			acked = nil
		}
		checkReopen(t, "power loss after a Pebble fatal", vfs.Default, noSync, acked, filepath.Join(dir, "power", "db"))
		return true
	}
	return false
}
