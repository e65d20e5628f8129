package proof

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkInclusion measures one inclusion proof in a 1M-leaf MemStore
// (2^20 leaves: every proof reads ~20 nodes, most rebuilt from ≤128 stored
// hashes).
func BenchmarkInclusion(b *testing.B) {
	const n = 1 << 20
	st := NewMemStore()
	for i := uint64(0); i < n; i++ {
		if err := st.AppendLeafHash(cheapLeaf(i)); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Inclusion(ctx, st, rng.Uint64N(n), n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFrontierRoot measures the frontier root over 10,000 anchors.
func BenchmarkFrontierRoot(b *testing.B) {
	entries := make([]Entry, 10000)
	for i := range entries {
		entries[i] = Entry{Anchor: fmt.Sprintf("anchor-%05d", i), Size: uint64(i + 1), Root: recordHash(uint64(i))}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := FrontierRoot(entries); err != nil {
			b.Fatal(err)
		}
	}
}
