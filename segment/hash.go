package segment

import (
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/anchordb/anchordb/internal/errs"
	"github.com/zeebo/blake3"
)

// HashSize is the size of every anchordb hash: BLAKE3-256.
const HashSize = 32

// Hash is a BLAKE3-256 digest. It prints as "blake3:<64 lowercase hex>".
type Hash [HashSize]byte

// String returns "blake3:" followed by the lowercase hex digest.
func (h Hash) String() string { return "blake3:" + hex.EncodeToString(h[:]) }

// IsZero reports whether every byte of h is zero.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText encodes the hash as its String form.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText parses the String form.
func (h *Hash) UnmarshalText(b []byte) error {
	p, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// ParseHash parses "blake3:<64 lowercase hex>".
func ParseHash(s string) (Hash, error) {
	var h Hash
	hexPart, ok := strings.CutPrefix(s, "blake3:")
	if !ok || len(hexPart) != 2*HashSize || strings.ToLower(hexPart) != hexPart {
		return h, errs.New(errs.CodeInvalidInput, "hash %q is not of the form blake3:<64 lowercase hex>", s)
	}
	if _, err := hex.Decode(h[:], []byte(hexPart)); err != nil {
		return h, errs.Wrap(errs.CodeInvalidInput, err, "hash %q", s)
	}
	return h, nil
}

// Domain separation. Every hash anchordb computes over its own data uses
// BLAKE3's derive-key mode with one of these contexts, so a record hash, a
// genesis hash, a header checksum, a fingerprint and a state hash can never be
// confused with one another or with the plain-mode Merkle hashes of RFC 6962
// (leaf 0x00‖…, node 0x01‖…), which CONTRACT §2 fixes so that third-party
// verifiers need nothing but BLAKE3.
const (
	ContextRecord      = "anchordb 2026-11 record v1"
	ContextGenesis     = "anchordb 2026-11 genesis v1"
	ContextHeader      = "anchordb 2026-11 segment header v1"
	ContextSeal        = "anchordb 2026-11 segment seal v1"
	ContextFingerprint = "anchordb 2026-11 idempotency fingerprint v1"
	ContextAnchorPath  = "anchordb 2026-11 anchor path v1"
)

// hasherPool keeps derive-key hashers per context: deriving the context key
// costs a compression, and a Hasher carries an 8 KiB buffer, so both are worth
// reusing on the append path.
type hasherPool struct {
	base *blake3.Hasher
	pool sync.Pool
}

func newHasherPool(context string) *hasherPool {
	p := &hasherPool{base: blake3.NewDeriveKey(context)}
	p.pool.New = func() any { return p.base.Clone() }
	return p
}

func (p *hasherPool) get() *blake3.Hasher { return p.pool.Get().(*blake3.Hasher) }

func (p *hasherPool) put(h *blake3.Hasher) {
	h.Reset() // Reset keeps the derive-key mode and key.
	p.pool.Put(h)
}

// sum hashes the concatenation of parts.
func (p *hasherPool) sum(parts ...[]byte) Hash {
	h := p.get()
	for _, b := range parts {
		_, _ = h.Write(b)
	}
	var out Hash
	h.Sum(out[:0])
	p.put(h)
	return out
}

var (
	recordHashers      = newHasherPool(ContextRecord)
	genesisHashers     = newHasherPool(ContextGenesis)
	headerHashers      = newHasherPool(ContextHeader)
	sealHashers        = newHasherPool(ContextSeal)
	fingerprintHashers = newHasherPool(ContextFingerprint)
	anchorPathHashers  = newHasherPool(ContextAnchorPath)
)

// GenesisHash is the prev_hash of an anchor's first record. It is derived from
// the anchor id, so a record cannot be moved to another anchor and still link.
func GenesisHash(anchor string) Hash {
	return genesisHashers.sum([]byte(anchor))
}

// Fingerprint is the idempotency fingerprint of a request (CONTRACT §7): a hash of
// its type, key and value, length-prefixed so that no two requests share one.
func Fingerprint(typ string, key, value []byte) Hash {
	var hdr [1 + 4 + 4]byte
	hdr[0] = byte(len(typ))
	be.PutUint32(hdr[1:5], uint32(len(key)))
	be.PutUint32(hdr[5:9], uint32(len(value)))
	return fingerprintHashers.sum(hdr[:], []byte(typ), key, value)
}

// AnchorPathID returns the 32 lowercase hex characters that name an anchor's
// directory. Anchor ids never become path components (CONTRACT §1): `../x` and
// `a/b` are legal ids, so the path is a hash of the id, and the id itself lives
// in every segment header, where open checks it.
func AnchorPathID(anchor string) string {
	h := anchorPathHashers.sum([]byte(anchor))
	return hex.EncodeToString(h[:16])
}

// ShortHex returns the first n bytes of h in hex, for messages.
func ShortHex(h Hash, n int) string { return fmt.Sprintf("%x", h[:n]) }
