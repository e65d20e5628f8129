package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestSettleAfterFailedSealSync: the settler's fsync of a segment succeeds
// after the applier's fsync of the same segment (its seal) failed and the
// kernel dropped the unsynced pages. A later fsync that succeeds proves
// nothing (fsyncgate), so the settle must not record its point or drop the
// journal: the journal is the only copy of the segment's records.
//
// Found by TestErrorInjection/drop-unsynced (op124, 2026-11-24): acknowledged
// records of a segment whose seal fsync failed were missing after a restart.
// In "reported" the seal's failure has stopped the database before the
// settle's fsync; in "unreported" the seal is held between its failed fsync
// and the report, so only the settle's wait for segIO can see it.
func TestSettleAfterFailedSealSync(t *testing.T) {
	for _, unreported := range []bool{false, true} {
		name := "reported"
		if unreported {
			name = "unreported"
		}
		t.Run(name, func(t *testing.T) { testSettleAfterFailedSealSync(t, unreported) })
	}
}

func testSettleAfterFailedSealSync(t *testing.T, unreported bool) {
	ctx := context.Background()
	const an = "a"
	opts := Options{SegmentSize: 2048, SettleBytes: 1 << 30, SettleInterval: time.Hour}
	mem := vfs.NewCrashableMem()
	seg1 := mem.PathJoin(segmentAnchorDir(mem, "db", an), segmentFileName(1))

	var armed atomic.Bool
	var syncs atomic.Int32
	settlerIn, settlerGo := make(chan struct{}), make(chan struct{})
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Path != seg1 || !armed.Load() {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			switch syncs.Add(1) {
			case 1: // the settler's: it runs once the seal's has failed
				close(settlerIn)
				<-settlerGo
			case 2: // the seal's
				return errorfs.ErrInjected
			}
		}
		return nil
	})
	ffs := newFaultFS(mem, inj, faultDropUnsynced)
	hold := &sealHoldFS{FS: ffs, path: seg1, failed: make(chan struct{}), release: make(chan struct{})}
	if !unreported {
		close(hold.release)
	}
	db := mustOpen(t, hold, opts)

	acks := &ackLog{}
	i := 0
	put := func() (anchorHead, error) {
		e := Entry{Anchor: an, Type: segment.TypePut, Key: []byte(fmt.Sprint("k", i)), Value: bytes.Repeat([]byte{'v'}, 200)}
		i++
		r, st, err := appendVisible(ctx, db, e)
		if r.Seq > 0 {
			acks.add(e, r)
		}
		return st, err
	}
	st, err := put()
	if err != nil {
		t.Fatal(err)
	}
	frame := st.segSize - int64(segment.HeaderSize(an))
	for st.segSize+frame <= opts.SegmentSize {
		if st, err = put(); err != nil {
			t.Fatal(err)
		}
	}
	if st.segno != 1 {
		t.Fatalf("segment %d active, want 1", st.segno)
	}

	// A settle captures segment 1 and stops in its fsync.
	armed.Store(true)
	settled := make(chan error, 1)
	go func() { settled <- db.Sync(context.Background()) }()
	select {
	case <-settlerIn:
	case <-time.After(10 * time.Second):
		t.Fatal("the settle never fsynced segment 1")
	}
	// The next record seals segment 1: that fsync fails and loses the
	// segment's unsynced bytes.
	go func() { _, _ = put() }()
	select {
	case <-hold.failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the seal's fsync never failed")
	}
	if unreported {
		// The settle's fsync succeeds while the seal has not yet reported
		// its failure: the settle must wait for it, not finish.
		close(settlerGo)
		select {
		case err := <-settled:
			t.Fatalf("the settle returned (%v) while a failed seal of a file it synced was unreported", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(hold.release)
	} else {
		deadline := time.Now().Add(10 * time.Second)
		for db.failed.Load() == nil {
			if time.Now().After(deadline) {
				t.Fatal("the failed seal did not stop the database")
			}
			time.Sleep(time.Millisecond)
		}
		close(settlerGo)
	}
	if err := <-settled; !errors.Is(err, ErrWriteFailed) {
		t.Fatalf("settle after the failed seal fsync: %v, want IO_001", err)
	}
	_ = db.Close()

	// A restart: the segment's bytes are gone, the journal must restore them.
	db2, err := Open("db", Options{FS: ffs.crashState(100, 1), SegmentSize: opts.SegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	for _, ev := range db2.RecoveryReport().Events {
		if ev.Kind == EventDamaged {
			t.Errorf("recovery reports damage: %v", ev)
		}
	}
	checkDB(t, db2, acks.snapshot())
}

// sealHoldFS holds a failed fsync of path, after the failure and before it
// is returned, until release is closed; failed is closed when it starts.
type sealHoldFS struct {
	vfs.FS
	path            string
	failed, release chan struct{}
	once            sync.Once
}

func (fs *sealHoldFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || name != fs.path {
		return f, err
	}
	return &sealHoldFile{File: f, fs: fs}, nil
}

func (fs *sealHoldFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *sealHoldFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

type sealHoldFile struct {
	vfs.File
	fs *sealHoldFS
}

func (f *sealHoldFile) Sync() error {
	err := f.File.Sync()
	if err != nil {
		f.fs.once.Do(func() { close(f.fs.failed) })
		<-f.fs.release
	}
	return err
}
