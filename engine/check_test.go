package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ackLog records receipts as they are acknowledged, so a test can ask which
// were acknowledged before a given moment.
type ackLog struct {
	mu       sync.Mutex
	receipts []ackedEntry
}

type ackedEntry struct {
	Receipt
	Entry
}

func (l *ackLog) add(e Entry, r Receipt) {
	l.mu.Lock()
	l.receipts = append(l.receipts, ackedEntry{Receipt: r, Entry: e})
	l.mu.Unlock()
}

func (l *ackLog) snapshot() []ackedEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.receipts)
}

// checkDB checks the invariants every reopened database must hold:
//   - every acknowledged receipt is present with its hash;
//   - every anchor's log reads back with dense seqs, linked prev hashes and
//     valid hashes (Log verifies each frame);
//   - the segments on disk, scanned independently, hold exactly what the
//     index says;
//   - Get of every key is the last put/delete in merged order.
func checkDB(t testing.TB, db *DB, acked []ackedEntry) {
	t.Helper()
	ctx := context.Background()
	for _, a := range acked {
		rec, err := db.Record(ctx, a.Receipt.Anchor, a.Seq)
		if err != nil {
			t.Fatalf("acknowledged %s seq %d lost: %v", a.Receipt.Anchor, a.Seq, err)
		}
		if rec.Hash != a.Hash {
			t.Fatalf("acknowledged %s seq %d has hash %s, receipt said %s", a.Receipt.Anchor, a.Seq, rec.Hash, a.Hash)
		}
	}
	type ver struct {
		counter uint64
		anchor  string
		rec     Record
	}
	latest := map[string]ver{}
	for info, err := range db.Anchors(ctx) {
		if err != nil {
			t.Fatalf("anchors: %v", err)
		}
		if info.Damage != "" {
			t.Fatalf("anchor %s damaged after a crash: %s", info.ID, info.Damage)
		}
		var logged []Record
		prev := segment.GenesisHash(info.ID)
		var lastCounter uint64
		for rec, err := range db.Log(ctx, info.ID, 1, 0) {
			if err != nil {
				t.Fatalf("log %s: %v", info.ID, err)
			}
			if rec.Seq != uint64(len(logged)+1) {
				t.Fatalf("log %s: seq %d at position %d", info.ID, rec.Seq, len(logged)+1)
			}
			if rec.PrevHash != prev {
				t.Fatalf("log %s seq %d: chain broken", info.ID, rec.Seq)
			}
			if rec.Counter <= lastCounter {
				t.Fatalf("log %s seq %d: counter %d not above %d", info.ID, rec.Seq, rec.Counter, lastCounter)
			}
			prev, lastCounter = rec.Hash, rec.Counter
			logged = append(logged, rec)
			if !rec.IsEvent() {
				k := string(rec.Key)
				v, ok := latest[k]
				if !ok || rec.Counter > v.counter || (rec.Counter == v.counter && rec.Anchor > v.anchor) {
					latest[k] = ver{rec.Counter, rec.Anchor, rec}
				}
			}
		}
		if uint64(len(logged)) != info.Records || (len(logged) > 0 && info.HeadHash != prev) {
			t.Fatalf("anchor %s: log has %d records ending %s; head says %d ending %s", info.ID, len(logged), prev, info.Records, info.HeadHash)
		}
		onDisk := scanAnchorFiles(t, db.fs, db.dir, info.ID)
		if len(onDisk) != len(logged) {
			t.Fatalf("anchor %s: segments hold %d records, index %d", info.ID, len(onDisk), len(logged))
		}
		for i := range onDisk {
			if onDisk[i] != logged[i].Hash {
				t.Fatalf("anchor %s seq %d: segment and index disagree", info.ID, i+1)
			}
		}
	}
	for k, v := range latest {
		got, err := db.Get(ctx, []byte(k))
		if v.rec.Type == segment.TypeDelete {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("get %q: want deleted, got %v %v", k, got, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got.Value, v.rec.Value) || got.Anchor != v.anchor || got.Seq != v.rec.Seq {
			t.Fatalf("get %q = %+v %v; want %s seq %d", k, got, err, v.anchor, v.rec.Seq)
		}
	}
	n := 0
	for v, err := range db.Scan(ctx, nil) {
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if w, ok := latest[string(v.Key)]; !ok || w.rec.Type == segment.TypeDelete || w.rec.Seq != v.Seq || w.anchor != v.Anchor {
			t.Fatalf("scan returned %q from %s seq %d", v.Key, v.Anchor, v.Seq)
		}
		n++
	}
	live := 0
	for _, v := range latest {
		if v.rec.Type != segment.TypeDelete {
			live++
		}
	}
	if n != live {
		t.Fatalf("scan returned %d keys, want %d", n, live)
	}
}

// scanAnchorFiles reads an anchor's segment files with the segment scanner
// alone and returns the record hashes in order, checking the chain across
// segments and that every segment but the last is sealed.
func scanAnchorFiles(t testing.TB, fs vfs.FS, dir, anchor string) []segment.Hash {
	t.Helper()
	adir := segment.AnchorDir(fs, dir, anchor)
	names, err := fs.List(adir)
	if err != nil {
		t.Fatalf("list %s: %v", adir, err)
	}
	var segnos []uint64
	for _, n := range names {
		if s, ok := segment.ParseFileName(n); ok {
			segnos = append(segnos, s)
		}
	}
	sort.Slice(segnos, func(i, j int) bool { return segnos[i] < segnos[j] })
	var out []segment.Hash
	prev := segment.GenesisHash(anchor)
	for i, s := range segnos {
		if s != uint64(i+1) {
			t.Fatalf("anchor %s: segment %d where %d belongs", anchor, s, i+1)
		}
		path := fs.PathJoin(adir, segment.FileName(s))
		f, err := fs.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		sc, err := segment.NewScanner(f, st.Size())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if sc.Header.PrevHash != prev || sc.Header.FirstSeq != uint64(len(out)+1) {
			t.Fatalf("%s: header does not continue the chain", path)
		}
		for {
			fr, err := sc.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out = append(out, fr.Record.Hash)
		}
		prev = sc.HeadHash()
		if i < len(segnos)-1 && sc.Footer() == nil {
			t.Fatalf("%s: not sealed but not the newest", path)
		}
		f.Close()
	}
	return out
}

// workload appends a mix of puts, deletes, events, idempotent retries and
// batches from several goroutines, recording acknowledgements. It stops at
// the first error (after a crash or an injected failure) and returns it.
func workload(ctx context.Context, db *DB, writers, perWriter int, acks *ackLog) error {
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				anchor := fmt.Sprintf("anchor-%d", (w*7+i)%3)
				key := []byte(fmt.Sprintf("key-%d", (w+i)%11))
				var err error
				switch i % 7 {
				case 3:
					e := Entry{Anchor: anchor, Type: segment.TypeDelete, Key: key}
					var r Receipt
					if r, err = db.Append(ctx, e); err == nil {
						acks.add(e, r)
					}
				case 5:
					e := Entry{Anchor: anchor, Type: "TELEMETRY", Value: bytes.Repeat([]byte{byte(i)}, 40+i)}
					var r Receipt
					if r, err = db.Append(ctx, e); err == nil {
						acks.add(e, r)
					}
				case 6:
					es := []Entry{
						{Anchor: anchor, Type: segment.TypePut, Key: key, Value: []byte(fmt.Sprintf("batch-%d-%d", w, i))},
						{Anchor: fmt.Sprintf("anchor-%d", (w+i+1)%3), Type: segment.TypePut, Key: []byte("shared"), Value: []byte(fmt.Sprint(w, i)),
							IdempotencyKey: []byte(fmt.Sprintf("op-%d-%d", w, i))},
					}
					var rs []Receipt
					if rs, err = db.AppendBatch(ctx, es); err == nil {
						for j := range rs {
							acks.add(es[j], rs[j])
						}
					}
				default:
					e := Entry{Anchor: anchor, Type: segment.TypePut, Key: key, Value: []byte(fmt.Sprintf("v-%d-%d-%s", w, i, bytes.Repeat([]byte("x"), i%50))),
						IdempotencyKey: []byte(fmt.Sprintf("put-%d-%d", w, i))}
					var r Receipt
					if r, err = db.Append(ctx, e); err == nil {
						acks.add(e, r)
						// An idempotent retry returns the same receipt.
						var r2 Receipt
						if r2, err = db.Append(ctx, e); err == nil && (!r2.Duplicate || r2.Seq != r.Seq) {
							err = fmt.Errorf("retry of %s got %+v, want duplicate of seq %d", e.IdempotencyKey, r2, r.Seq)
						}
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	return <-errc
}
