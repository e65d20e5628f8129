package fuzz

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"golang.org/x/mod/sumdb/note"
)

// Fuzz targets for what a verifier reads from someone else: proofs (JSON)
// and checkpoints (signed notes). Oracles: never panic; refusals carry the
// documented codes; and nothing altered is accepted as something else.

// proofTree builds a tree of n leaves whose record hashes derive from seed.
func proofTree(seed byte, n uint64) (*proof.MemStore, []segment.Hash) {
	st := proof.NewMemStore()
	hashes := make([]segment.Hash, n)
	for i := range hashes {
		hashes[i][0], hashes[i][1], hashes[i][2] = seed, byte(i), byte(i>>8)
		if err := st.Append(hashes[i]); err != nil {
			panic(err)
		}
	}
	return st, hashes
}

func inclusionJSON(seed byte, n, seq, size uint64) []byte {
	st, hashes := proofTree(seed, n)
	p, err := proof.ProveInclusion(context.Background(), st, "dev-1", seq, size, hashes[seq-1])
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(p)
	return b
}

func consistencyJSON(seed byte, n, old, size uint64) []byte {
	st, _ := proofTree(seed, n)
	p, err := proof.ProveConsistency(context.Background(), st, "dev-1", old, size)
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(p)
	return b
}

// proofCode is every code VerifyJSON may refuse with.
func proofCode(err error) bool {
	switch errs.CodeOf(err) {
	case errs.CodeInvalidInput, errs.CodeHashMismatch, errs.CodeChainBroken, errs.CodeDependencyMissing:
		return true
	}
	return false
}

// FuzzVerifyProofJSON: any bytes as a proof. Never panic; refusals are
// INPUT_001 or an INT_* code; an accepted proof re-encodes to JSON that is
// accepted again as the same proof.
func FuzzVerifyProofJSON(f *testing.F) {
	f.Add(inclusionJSON(1, 300, 7, 300))
	f.Add(inclusionJSON(2, 257, 257, 257))
	f.Add(consistencyJSON(3, 300, 255, 257))
	f.Add(consistencyJSON(4, 10, 0, 10))
	f.Add([]byte(`{"kind":"frontier"}`))
	f.Add([]byte(`{"anchor":"a","seq":1,"size":1,"leaf":"blake3:00","root":"blake3:00","proof":[]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := proof.VerifyJSON(b)
		if err != nil {
			if !proofCode(err) {
				t.Fatalf("refused with %v (code %q)", err, errs.CodeOf(err))
			}
			return
		}
		var again []byte
		switch {
		case v.Inclusion != nil:
			again, err = json.Marshal(v.Inclusion)
		case v.Consistency != nil:
			again, err = json.Marshal(v.Consistency)
		case v.Frontier != nil:
			again, err = json.Marshal(v.Frontier)
		default:
			t.Fatalf("accepted without a proof: %+v", v)
		}
		if err != nil {
			t.Fatalf("marshal an accepted proof: %v", err)
		}
		v2, err := proof.VerifyJSON(again)
		if err != nil || v2.String() != v.String() {
			t.Fatalf("re-encoded proof: %v\n%s\n%s", err, v, v2)
		}
	})
}

// FuzzProofMutation: a genuine proof from a real tree, with one byte of its
// JSON changed. If it still verifies, it must prove the same thing: the same
// leaf at the same position under the same root (inclusion), the same two
// roots (consistency), with the same hashes. Two fields are labels the proof
// alone does not bind, as in every RFC 6962 proof: the anchor name, and the
// tree size(s) — the fuzzer found an inclusion proof of seq 100 that
// verifies for size 306 and 307 alike, because both trees give the path the
// same shape. A verifier binds them by checking (anchor, size, root) against
// a signed checkpoint, which is what `verify-proof` tells its user to do.
func FuzzProofMutation(f *testing.F) {
	f.Add(byte(1), uint16(300), uint16(7), uint16(300), false, uint16(10), byte(1))
	f.Add(byte(2), uint16(257), uint16(256), uint16(257), true, uint16(40), byte(0x20))
	f.Add(byte(3), uint16(1), uint16(1), uint16(1), false, uint16(3), byte(0x80))
	f.Fuzz(func(t *testing.T, seed byte, n, a, b uint16, consistency bool, at uint16, xor byte) {
		size := uint64(n%600) + 1
		x, y := uint64(a)%size+1, uint64(b)%size+1
		if x > y {
			x, y = y, x
		}
		var orig []byte
		if consistency {
			orig = consistencyJSON(seed, size, x, y)
		} else {
			orig = inclusionJSON(seed, size, x, y)
		}
		want, err := proof.VerifyJSON(orig)
		if err != nil {
			t.Fatalf("a genuine proof does not verify: %v", err)
		}
		if xor == 0 {
			return
		}
		mut := bytes.Clone(orig)
		mut[int(at)%len(mut)] ^= xor
		got, err := proof.VerifyJSON(mut)
		if err != nil {
			if !proofCode(err) {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		same := func(g, w proof.Verified) bool {
			switch {
			case g.Inclusion != nil && w.Inclusion != nil:
				gi, wi := *g.Inclusion, *w.Inclusion
				gi.Anchor, wi.Anchor, gi.Size, wi.Size = "", "", 0, 0
				return fmt.Sprint(gi) == fmt.Sprint(wi)
			case g.Consistency != nil && w.Consistency != nil:
				gc, wc := *g.Consistency, *w.Consistency
				gc.Anchor, wc.Anchor, gc.OldSize, wc.OldSize, gc.NewSize, wc.NewSize = "", "", 0, 0, 0, 0
				return fmt.Sprint(gc) == fmt.Sprint(wc)
			}
			return false
		}
		if !same(got, want) {
			t.Fatalf("a changed proof verifies as something else:\n was %s\n now %s\n%s", want, got, mut)
		}
	})
}

// fuzzKeys is a fixed signer and verifier, so committed corpus notes stay
// valid across runs.
var fuzzSigner, fuzzVerifier = func() (string, string) {
	s, v, err := note.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)), "fuzz")
	if err != nil {
		panic(err)
	}
	return s, v
}()

func checkpointNote(n int) []byte {
	var entries []proof.Entry
	for i := 0; i < n; i++ {
		var root segment.Hash
		root[0] = byte(i + 1)
		entries = append(entries, proof.Entry{Anchor: fmt.Sprintf("dev-%d", i), Size: uint64(i + 1), Root: root})
	}
	c, err := proof.NewCheckpoint("0123456789abcdef0123456789abcdef", time.Unix(1_800_000_000, 5), entries)
	if err != nil {
		panic(err)
	}
	signed, err := proof.Sign(c.Marshal(), fuzzSigner)
	if err != nil {
		panic(err)
	}
	return signed
}

// FuzzCheckpointBody: any text as a checkpoint body. Never panic; a body
// that parses marshals to bytes that parse to the same checkpoint, and is
// the canonical form of itself (a checkpoint has one encoding, so a
// signature covers exactly one meaning).
func FuzzCheckpointBody(f *testing.F) {
	for _, n := range []int{0, 1, 3} {
		signed := checkpointNote(n)
		f.Add(signed[:bytes.Index(signed, []byte("\n\n"))+1])
	}
	f.Add([]byte("anchordb/x/blake3\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := proof.ParseCheckpointBody(body)
		if err != nil {
			if errs.CodeOf(err) == "" {
				t.Fatalf("refused without a code: %v", err)
			}
			return
		}
		m := c.Marshal()
		if !bytes.Equal(m, body) {
			t.Fatalf("accepted a body that is not canonical:\n got %q\nwant %q", body, m)
		}
		c2, err := proof.ParseCheckpointBody(m)
		if err != nil || !bytes.Equal(c2.Marshal(), m) {
			t.Fatalf("canonical body does not round-trip: %v", err)
		}
	})
}

// FuzzOpenCheckpoint: a signed checkpoint, with bytes changed. It opens
// with the key only if its body is byte for byte the one that was signed;
// anything else is refused with AUTH_003 or INPUT_001.
func FuzzOpenCheckpoint(f *testing.F) {
	f.Add(uint16(0), byte(0), byte(0))
	f.Add(uint16(5), byte(1), byte(2))
	f.Add(uint16(90), byte(0x20), byte(1))
	f.Fuzz(func(t *testing.T, at uint16, xor, n byte) {
		orig := checkpointNote(int(n % 4))
		body := orig[:bytes.Index(orig, []byte("\n\n"))+1]
		mut := bytes.Clone(orig)
		mut[int(at)%len(mut)] ^= xor
		c, err := proof.OpenCheckpoint(mut, fuzzVerifier)
		if err != nil {
			if c := errs.CodeOf(err); c != errs.CodeSignatureInvalid && c != errs.CodeInvalidInput {
				t.Fatalf("refused with %v (code %q)", err, c)
			}
			if xor == 0 {
				t.Fatalf("the genuine checkpoint is refused: %v", err)
			}
			return
		}
		if !bytes.Equal(c.Marshal(), body) {
			t.Fatalf("a changed note opened as another checkpoint:\n%s", c.Marshal())
		}
	})
}
