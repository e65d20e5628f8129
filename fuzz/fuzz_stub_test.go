package fuzz

import (
	"bytes"
	"testing"

	"github.com/anchordb/anchordb/segment"
	"github.com/zeebo/blake3"
)

// withChecksum returns body with a valid stub checksum, so the fuzzer's
// mutations reach the parser behind the checksum.
func withChecksum(body []byte) []byte {
	h := blake3.NewDeriveKey(segment.ContextStub)
	_, _ = h.Write(body)
	return h.Sum(append([]byte(nil), body...))
}

// stubFile returns the stub of a segment of n records of the anchor, keeping
// every record that has a key (puts and deletes) and the idempotency keys.
func stubFile(anchor string, n int) []byte {
	st := segment.Stub{Anchor: anchor, Segno: 1, FirstSeq: 1, PrevHash: segment.GenesisHash(anchor)}
	prev := st.PrevHash
	for seq := uint64(1); seq <= uint64(n); seq++ {
		r := record(anchor, seq, prev)
		_ = segment.AppendFrame(nil, &r) // sets r.Hash
		prev = r.Hash
		st.Hashes = append(st.Hashes, r.Hash)
		st.Counters = append(st.Counters, r.Counter)
		st.LastCounter = r.Counter
		if r.IsKV() {
			st.Kept = append(st.Kept, r)
		}
		if len(r.IdempotencyKey) > 0 {
			st.Idem = append(st.Idem, segment.StubIdem{Seq: r.Seq, Counter: r.Counter,
				Fingerprint: segment.Fingerprint(r.Type, r.Key, r.Value), Key: r.IdempotencyKey})
		}
	}
	return segment.AppendStub(nil, &st)
}

// FuzzParseStub: a stub is read by recovery, rebuilds and verify from disk,
// so any bytes may arrive. Never panic; whatever is accepted re-encodes to
// exactly its bytes, its kept records hash to the stub's hashes, and its
// counters increase.
func FuzzParseStub(f *testing.F) {
	// The first byte picks the mode: even, the bytes as they are; odd, the
	// rest is a stub body that gets a valid checksum.
	body := func(b []byte) []byte { return append([]byte{1}, b[:len(b)-segment.HashSize]...) }
	f.Add(append([]byte{0}, stubFile("a", 1)...))
	f.Add(append([]byte{0}, stubFile("device-17", 7)...))
	f.Add(body(stubFile("a", 1)))
	f.Add(body(stubFile("device-17", 7)))
	f.Add(body(stubFile("x", 3))[:40])
	f.Add([]byte("\x00ANCHSTUB"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		b := in[1:]
		if in[0]&1 == 1 {
			b = withChecksum(b)
		}
		st, err := segment.ParseStub(b)
		if err != nil {
			return
		}
		if again := segment.AppendStub(nil, &st); !bytes.Equal(again, b) {
			t.Fatalf("accepted stub re-encodes differently:\n got %x\nwant %x", again, b)
		}
		if len(st.Hashes) != len(st.Counters) || st.Counters[len(st.Counters)-1] != st.LastCounter {
			t.Fatalf("counters %v do not match hashes (%d) and last counter %d", st.Counters, len(st.Hashes), st.LastCounter)
		}
		for i := 1; i < len(st.Counters); i++ {
			if st.Counters[i] <= st.Counters[i-1] {
				t.Fatalf("counters do not increase: %v", st.Counters)
			}
		}
		for _, r := range st.Kept {
			if r.Seq < st.FirstSeq || r.Seq > st.LastSeq() || st.HashAt(r.Seq) != r.Hash || r.ComputeHash() != r.Hash {
				t.Fatalf("kept record seq %d does not hash to the stub's hash", r.Seq)
			}
		}
		for _, e := range st.Idem {
			if e.Seq < st.FirstSeq || e.Seq > st.LastSeq() || len(e.Key) == 0 {
				t.Fatalf("idempotency entry %+v outside the stub", e)
			}
		}
	})
}
