package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine/internal/admission"
	"github.com/anchordb/anchordb/engine/internal/schema"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestEveryCodeReadsWithOneErrorsAs: every code of SPEC §8, each returned
// by a real call of the API, is read by one errors.As with an *Error — the
// admission refusals (*RefusalError) included, which are still
// *RefusalError values with their RetryAfter.
func TestEveryCodeReadsWithOneErrorsAs(t *testing.T) {
	ctx := context.Background()
	got := map[Code]error{}

	// CAP_001, CAP_002: the in-flight bound held by an admitted request.
	for _, refuse := range []bool{false, true} {
		fs := vfs.NewMem()
		db := mustOpen(t, fs, Options{SegmentSize: 4096, MaxInFlightRecords: 1, RefuseWhenFull: refuse})
		held := &admission.Cost{Records: 1, Bytes: 1, Anchors: map[string]int{"x": 1}}
		if err := db.adm.Acquire(ctx, held, false); err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, time.Millisecond)
		_, err := db.Put(actx, "a", []byte("k"), []byte("v"))
		cancel()
		db.adm.Release(held)
		if refuse {
			got[errs.CodeQueueFull] = err
		} else {
			got[errs.CodeCapacityExhausted] = err
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// CAP_003: a rate limit of one record with no burst left.
	{
		fs := vfs.NewMem()
		db := mustOpen(t, fs, Options{SegmentSize: 4096, AnchorRate: 0.001, AnchorBurst: 1})
		if _, err := db.Put(ctx, "a", []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		_, got[errs.CodeRateLimited] = db.Put(ctx, "a", []byte("k"), []byte("v"))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	fs := vfs.NewMem()
	db := mustOpen(t, fs, memOpts(fs))
	defer func() { _ = db.Close() }()
	// STATE_001: a second open of an open database.
	if db2, err := Open("db", memOpts(fs)); err == nil {
		_ = db2.Close()
		t.Fatal("a second open succeeded")
	} else {
		got[errs.CodeScopeLocked] = err
	}
	// STATE_002: an idempotency key reused for another request (a
	// *ConflictError).
	if _, err := db.Append(ctx, Entry{Anchor: "a", Type: "put", Key: []byte("k"), Value: []byte("1"), IdempotencyKey: []byte("i")}); err != nil {
		t.Fatal(err)
	}
	_, got[errs.CodeConflict] = db.Append(ctx, Entry{Anchor: "a", Type: "put", Key: []byte("k"), Value: []byte("2"), IdempotencyKey: []byte("i")})
	// STATE_003: a proof of an anchor the database does not hold.
	_, got[errs.CodeDependencyMissing] = db.ProveInclusion(ctx, "nosuch", 1, 0)
	// INPUT_001: a put without a key.
	_, got[errs.CodeInvalidInput] = db.Put(ctx, "a", nil, []byte("v"))
	// AUTH_003: a checkpoint opened with another key than its signer's.
	signer, _, err := proof.GenerateKeys("one")
	if err != nil {
		t.Fatal(err)
	}
	_, otherPub, err := proof.GenerateKeys("two")
	if err != nil {
		t.Fatal(err)
	}
	note, _, err := db.CreateCheckpoint(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	_, got[errs.CodeSignatureInvalid] = proof.OpenCheckpoint(note, otherPub)
	// INT_003: a snapshot with a byte flipped.
	info, err := db.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, fs, info.Path, 100)
	_, got[errs.CodeSnapshotCorrupted] = db.VerifySnapshot(ctx, info.Path)

	// INT_001, INT_002, INT_004: one record each of three anchors, read
	// after its segment byte, or its index row, was damaged.
	for _, a := range []string{"hash", "chain", "index"} {
		if _, err := db.Put(ctx, a, []byte("k-"+a), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	seg := fs.PathJoin(segmentAnchorDir(fs, "db", "hash"), segment.FileName(1))
	st, err := fs.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, fs, seg, st.Size()-1) // the last byte of the record's hash
	_, got[errs.CodeHashMismatch] = db.Record(ctx, "hash", 1)
	for a, change := range map[string]func(*schema.Location){
		"chain": func(e *schema.Location) { e.Segno = 9 }, // a segment that is not there
		"index": func(e *schema.Location) { e.Counter++ }, // a row that disagrees with its frame
	} {
		e, ok, err := db.location(a, 1)
		if err != nil || !ok {
			t.Fatalf("row of %s: %v %v", a, ok, err)
		}
		change(&e)
		if err := db.index.Set(schema.SeqKey(a, 1), e.Append(nil), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	_, got[errs.CodeChainBroken] = db.Record(ctx, "chain", 1)
	_, got[errs.CodeIndexMismatch] = db.Record(ctx, "index", 1)

	// IO_001: a call after Close.
	closed := mustOpen(t, vfs.NewMem(), memOpts(nil))
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	_, got[errs.CodeWriteFailed] = closed.Put(ctx, "a", []byte("k"), []byte("v"))

	for _, code := range []Code{
		errs.CodeCapacityExhausted, errs.CodeQueueFull, errs.CodeRateLimited,
		errs.CodeScopeLocked, errs.CodeConflict, errs.CodeDependencyMissing,
		errs.CodeHashMismatch, errs.CodeChainBroken, errs.CodeSnapshotCorrupted, errs.CodeIndexMismatch,
		errs.CodeSignatureInvalid, errs.CodeWriteFailed, errs.CodeInvalidInput,
	} {
		err, ok := got[code]
		if !ok || err == nil {
			t.Errorf("%s: the call meant to return it returned no error", code)
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != code {
			t.Errorf("%s: errors.As(err, *engine.Error) gives %v for %T %v", code, e, err, err)
			continue
		}
		if CodeOf(err) != code || e.Reason() != code.Reason() {
			t.Errorf("%s: CodeOf %q, reason %q", code, CodeOf(err), e.Reason())
		}
		var re *RefusalError
		if isCap := code == errs.CodeCapacityExhausted || code == errs.CodeQueueFull || code == errs.CodeRateLimited; isCap != errors.As(err, &re) {
			t.Errorf("%s: a *RefusalError is %v", code, !isCap)
		}
	}
	var re *RefusalError
	if errors.As(got[errs.CodeRateLimited], &re) && re.RetryAfter <= 0 {
		t.Errorf("CAP_003 without its RetryAfter: %v", re)
	}
}

// flipByte inverts the byte at off of the file at path.
func flipByte(t *testing.T, fs vfs.FS, path string, off int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// Open of a path that is a regular file, or under one, is INPUT_001 "not a
// directory" and creates nothing: it was IO_001 about a lock file under it,
// which sent the operator after the wrong thing.
func TestOpenOfAFileIsNotADirectory(t *testing.T) {
	fs := vfs.NewMem()
	f, err := fs.Create("file", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for _, dir := range []string{"file", "file/db"} {
		db, err := Open(dir, Options{FS: fs})
		if err == nil {
			_ = db.Close()
			t.Fatalf("Open(%q) of a regular file succeeded", dir)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != errs.CodeInvalidInput || !strings.Contains(e.Message, "not a directory") {
			t.Errorf("Open(%q) of a regular file: %v, want INPUT_001 not a directory", dir, err)
		}
	}
	if names, _ := fs.List(""); len(names) != 1 {
		t.Errorf("Open of a file left %v", names)
	}
}
