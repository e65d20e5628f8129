package outbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// clock is a controllable clock for tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newMem() vfs.FS { return vfs.NewMem() }

func openMemDB(t testing.TB, fs vfs.FS) *engine.DB {
	t.Helper()
	db, err := engine.Open("db", engine.Options{FS: fs, SegmentSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// testOutbox opens a database on a fresh MemFS and outbox "billing" on it
// with a controlled clock and no background flushes; both close when the
// test ends.
func testOutbox(t testing.TB, opts Options) (*Outbox, *engine.DB, *clock) {
	t.Helper()
	db := openMemDB(t, vfs.NewMem())
	c := newClock()
	if opts.Clock == nil {
		opts.Clock = c.Now
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = -1
	}
	ob, err := Open(context.Background(), db, "billing", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ob.Close(); err != nil {
			t.Errorf("close outbox: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("close db: %v", err)
		}
	})
	return ob, db, c
}

func mustVerify(t testing.TB, ob *Outbox) {
	t.Helper()
	rep, err := ob.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("verify: %+v", rep.Failures)
	}
}
