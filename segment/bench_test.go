package segment

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Benchmarks on the shape docs/PERFORMANCE.md's benchmarks use: 16-byte
// keys, 100-byte values. Throughput is in frame bytes (b.SetBytes), so MB/s
// compares with disk bandwidth.
//
//	go test ./segment -run '^$' -bench . -benchmem

func benchRecord(seq uint64, prev Hash) Record {
	key := make([]byte, 16)
	be.PutUint64(key, seq)
	copy(key[8:], "bench-key")
	return Record{
		Anchor: "bench-anchor", Seq: seq, Counter: seq, Time: 1_767_225_600_000_000_000 + int64(seq),
		Type: TypePut, Key: key, Value: bytes.Repeat([]byte{'v'}, 100), PrevHash: prev,
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	r := benchRecord(1, GenesisHash("bench-anchor"))
	buf := make([]byte, 0, r.FrameSize())
	b.SetBytes(int64(r.FrameSize()))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendFrame(buf[:0], &r)
	}
}

func BenchmarkParseFrame(b *testing.B) {
	r := benchRecord(1, GenesisHash("bench-anchor"))
	frame := AppendFrame(nil, &r)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseFrame("bench-anchor", frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanner scans a sealed segment of 10,000 records held in memory:
// the cost recovery and verification pay per byte, without the disk.
func BenchmarkScanner(b *testing.B) {
	const n = 10_000
	hdr := Header{Anchor: "bench-anchor", Segno: 1, FirstSeq: 1, PrevHash: GenesisHash("bench-anchor")}
	data := AppendHeader(nil, &hdr)
	prev := hdr.PrevHash
	for seq := uint64(1); seq <= n; seq++ {
		r := benchRecord(seq, prev)
		data = AppendFrame(data, &r)
		prev = r.Hash
	}
	f := Footer{LastSeq: n, Count: n, LastHash: prev}
	data = AppendFooter(data, &f, hdr.Checksum)
	rd := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		sc, err := NewScanner(rd, int64(len(data)))
		if err != nil {
			b.Fatal(err)
		}
		count := 0
		for {
			_, err := sc.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			count++
		}
		if count != n || sc.Footer() == nil {
			b.Fatalf("scanned %d records", count)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
}

func BenchmarkComputeHash(b *testing.B) {
	r := benchRecord(1, GenesisHash("bench-anchor"))
	b.SetBytes(int64(r.BodySize()))
	b.ReportAllocs()
	for b.Loop() {
		_ = r.ComputeHash()
	}
}
