package snapshot

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkVerifyAudit scans audit logs of a few sizes: what verify, open
// and every compaction pay, and what bounds FuzzAuditLog's speed.
func BenchmarkVerifyAudit(b *testing.B) {
	for _, lines := range []int{3, 100, 10_000} {
		b.Run(fmt.Sprintf("lines=%d", lines), func(b *testing.B) {
			fs := vfs.NewMem()
			if err := fs.MkdirAll("db", 0o755); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < lines; i++ {
				a := Action{Kind: ActionRemoveSegment, Anchor: fmt.Sprintf("anchor-%d", i%3), Segno: uint64(i + 1), FirstSeq: 1, LastSeq: 10,
					Bytes: 4096, Hash: hashOf(fmt.Sprint(i)), Reason: "wholly below the cut"}
				if _, err := Append(fs, auditPath, a.AuditEntry(testCreated, specPolicyRef)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if head, err := VerifyAudit(fs, auditPath); err != nil || head.Lines != uint64(lines) {
					b.Fatal(head, err)
				}
			}
		})
	}
}
