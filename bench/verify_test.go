package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
)

// Verification benchmarks. One op is a full Verify of a closed-and-reopened
// database of verifyAnchors anchors, each with perAnchor puts of a 16-byte
// key and a verifyValueSize-byte value (frames of about 380 bytes), in
// 1 MiB segments, so most segments are sealed. Two peers, over the same
// record bytes already in memory (no reads, no parsing, no index):
// PeerHashOnly is BLAKE3 alone (segment.HashBody, the record hash);
// PeerHashLinkTree also checks that each record links to the one before
// (its prev_hash, the genesis hash for the first) and builds each anchor's
// RFC 6962 compact range over the records (the leaf hash, and the nodes
// above it), the chain and tree a verifier must rebuild. All report
// records/s and MB/s of frame bytes.
//
//	go test -run '^$' -bench 'Verify|PeerHash' -benchtime 5x ./bench/
//
// Targets: Verify/threads=1 ≥ 0.7× PeerHashLinkTree/threads=1, and
// Verify/threads=2 ≥ 1.6× Verify/threads=1.

const (
	verifyAnchors   = 16
	verifyValueSize = 256
)

// verifyPerAnchor is the fixture's records per anchor (8,192).
func verifyPerAnchor() int { return sized(8192, 256) }

// verifyFixture is a closed database on the real filesystem and its records'
// bytes, for the peer.
type verifyFixture struct {
	dir        string
	records    int64
	frameBytes int64
	anchors    []string
	// bodies[i] are the record bodies of anchors[i], in seq order.
	bodies [][][]byte
}

var verifyFixtures onceBySize[*verifyFixture]

// verifyValue writes value i (size bytes) into dst.
func verifyValue(dst []byte, i uint64) []byte {
	dst = dst[:verifyValueSize]
	off := mix(i^0x2545f491) % (poolSize - verifyValueSize)
	copy(dst, valuePool[off:off+verifyValueSize])
	be.PutUint64(dst[0:8], i)
	return dst
}

func buildVerifyFixture(perAnchor int) (*verifyFixture, error) {
	total := verifyAnchors * perAnchor
	fx := &verifyFixture{anchors: AnchorIDs(verifyAnchors)}
	dir, err := keptFixture(fmt.Sprintf("verify-%d", perAnchor), func(dir string) error {
		db, err := engine.Open(dir, engine.Options{NoSync: true, SegmentSize: 1 << 20})
		if err != nil {
			return err
		}
		ctx := context.Background()
		batch := make([]engine.Entry, 0, loadBatch)
		var k [KeySize]byte
		for i := 0; i < total; i++ {
			v := make([]byte, verifyValueSize)
			batch = append(batch, engine.Entry{Anchor: fx.anchors[i%verifyAnchors], Type: segment.TypePut,
				Key: slices.Clone(Key(k[:], uint64(i))), Value: verifyValue(v, uint64(i))})
			if len(batch) == cap(batch) || i == total-1 {
				if _, err := db.AppendBatch(ctx, batch); err != nil {
					_ = db.Close()
					return err
				}
				batch = batch[:0]
			}
		}
		return db.Close()
	})
	if err != nil {
		return nil, err
	}
	fx.dir = dir
	// The peers' input: every record body, read back from the segments.
	for _, a := range fx.anchors {
		bodies, n, err := readBodies(dir, a)
		if err != nil {
			return nil, err
		}
		fx.bodies = append(fx.bodies, bodies)
		fx.records += int64(len(bodies))
		fx.frameBytes += n
	}
	if fx.records != int64(total) {
		return nil, fmt.Errorf("fixture holds %d records, want %d", fx.records, total)
	}
	return fx, nil
}

// readBodies returns the record bodies of an anchor's segments and the
// total size of their frames.
func readBodies(dir, anchor string) ([][]byte, int64, error) {
	id := segment.AnchorPathID(anchor)
	files, err := filepath.Glob(filepath.Join(dir, segment.AnchorsDir, id[:2], id[2:], "*.seg"))
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(files)
	var bodies [][]byte
	var n int64
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, 0, err
		}
		sc, err := segment.NewScanner(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return nil, 0, err
		}
		for {
			fr, err := sc.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", f, err)
			}
			bodies = append(bodies, data[fr.Offset+4:fr.Offset+int64(fr.Size)-segment.HashSize])
			n += int64(fr.Size)
		}
	}
	return bodies, n, nil
}

// verifyDB: one op is db.Verify with the given threads over the fixture.
func verifyDB(perAnchor, threads int) func(tb testing.TB) (body, *verifyFixture) {
	return func(tb testing.TB) (body, *verifyFixture) {
		fx, err := verifyFixtures.get(perAnchor, buildVerifyFixture)
		if err != nil {
			tb.Fatalf("verify fixture: %v", err)
		}
		db := openEngine(tb, fx.dir, engine.Options{})
		ctx := context.Background()
		return func(n int) (int64, error) {
			for op := 0; op < n; op++ {
				rep, err := db.Verify(ctx, engine.VerifyOptions{Threads: threads})
				if err != nil {
					return int64(op) * fx.records, err
				}
				if !rep.OK || int64(rep.Records) != fx.records {
					return int64(op) * fx.records, fmt.Errorf("verify: ok=%v, %d records of %d, %v", rep.OK, rep.Records, fx.records, rep.Failures)
				}
			}
			return int64(n) * fx.records, nil
		}, fx
	}
}

// peerHashOnly: one op is segment.HashBody over every record body of the
// fixture, on threads goroutines (anchors split among them).
func peerHashOnly(perAnchor, threads int) func(tb testing.TB) (body, *verifyFixture) {
	return func(tb testing.TB) (body, *verifyFixture) {
		fx, err := verifyFixtures.get(perAnchor, buildVerifyFixture)
		if err != nil {
			tb.Fatalf("verify fixture: %v", err)
		}
		sinks := make([]byte, threads*64)
		return func(n int) (int64, error) {
			for op := 0; op < n; op++ {
				err := Parallel(len(fx.anchors), threads, func(w, i int) error {
					var x byte
					for _, b := range fx.bodies[i] {
						h := segment.HashBody(fx.anchors[i], b)
						x ^= h[0]
					}
					sinks[w*64] ^= x
					return nil
				})
				if err != nil {
					return 0, err
				}
			}
			return int64(n) * fx.records, nil
		}, fx
	}
}

// peerHashLinkTree: one op is, for every anchor of the fixture (anchors
// split among threads goroutines), segment.HashBody over each record body,
// a check that the body's prev_hash (its last 32 bytes) is the hash of the
// record before (the genesis hash for the first), and the anchor's RFC 6962
// compact range built from the record hashes (segment.LeafHash, then the
// tree's nodes: proof.NewRange), its root computed at the end.
func peerHashLinkTree(perAnchor, threads int) func(tb testing.TB) (body, *verifyFixture) {
	return func(tb testing.TB) (body, *verifyFixture) {
		fx, err := verifyFixtures.get(perAnchor, buildVerifyFixture)
		if err != nil {
			tb.Fatalf("verify fixture: %v", err)
		}
		sinks := make([]byte, threads*64)
		return func(n int) (int64, error) {
			for op := 0; op < n; op++ {
				err := Parallel(len(fx.anchors), threads, func(w, i int) error {
					anchor := fx.anchors[i]
					prev := segment.GenesisHash(anchor)
					rng := proof.NewRange()
					for seq, b := range fx.bodies[i] {
						if !bytes.Equal(b[len(b)-segment.HashSize:], prev[:]) {
							return fmt.Errorf("%s #%d does not link", anchor, seq+1)
						}
						prev = segment.HashBody(anchor, b)
						leaf := segment.LeafHash(prev)
						if err := rng.Append(leaf[:], nil); err != nil {
							return err
						}
					}
					root, err := rng.GetRootHash(nil)
					if err != nil {
						return err
					}
					sinks[w*64] ^= root[0]
					return nil
				})
				if err != nil {
					return 0, err
				}
			}
			return int64(n) * fx.records, nil
		}, fx
	}
}

// runVerifyBench measures like run, and reports MB/s of frame bytes too.
func runVerifyBench(b *testing.B, w func(tb testing.TB) (body, *verifyFixture)) {
	fn, fx := w(b)
	b.ResetTimer()
	recs, err := fn(b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(recs)/sec, "records/s")
	b.ReportMetric(float64(fx.frameBytes)*float64(b.N)/sec/1e6, "MB/s")
}

func BenchmarkVerify(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			runVerifyBench(b, verifyDB(verifyPerAnchor(), threads))
		})
	}
}

func BenchmarkPeerHashOnly(b *testing.B) {
	b.Run("threads=1", func(b *testing.B) {
		runVerifyBench(b, peerHashOnly(verifyPerAnchor(), 1))
	})
}

func BenchmarkPeerHashLinkTree(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			runVerifyBench(b, peerHashLinkTree(verifyPerAnchor(), threads))
		})
	}
}

// TestVerifyWorkloads runs the verification bodies once on a small fixture.
func TestVerifyWorkloads(t *testing.T) {
	for name, w := range map[string]func(tb testing.TB) (body, *verifyFixture){
		"Verify/threads=1":           verifyDB(64, 1),
		"Verify/threads=2":           verifyDB(64, 2),
		"PeerHashOnly/threads=1":     peerHashOnly(64, 1),
		"PeerHashLinkTree/threads=1": peerHashLinkTree(64, 1),
		"PeerHashLinkTree/threads=2": peerHashLinkTree(64, 2),
	} {
		t.Run(name, func(t *testing.T) {
			fn, fx := w(t)
			recs, err := fn(2)
			if err != nil {
				t.Fatal(err)
			}
			if recs != 2*64*verifyAnchors || fx.frameBytes < recs/2*verifyValueSize {
				t.Fatalf("%d records, %d frame bytes", recs, fx.frameBytes)
			}
		})
	}
}
