// Package proof builds and checks the verifiable side of anchordb (CONTRACT §2,
// §5, §10): per-anchor RFC 6962/9162 Merkle trees with BLAKE3-256, inclusion
// and consistency proofs, the frontier commitment over all anchors, and
// checkpoints signed in the C2SP signed-note format.
//
// It is pure code: it imports segment (the hash type and the BLAKE3 tree
// hasher) and internal/errs, and reaches storage only through the NodeStore
// interface, which the engine implements over its index and MemStore
// implements in memory.
//
// # Trees and stored levels
//
// Leaf i of an anchor tree is HashLeaf(hash of the record with seq i+1). A
// store keeps level 0 (the leaf hashes) and every perfect-subtree node at a
// level that is a multiple of TileHeight (8, 16, 24, …). Any perfect subtree
// is then rebuilt from at most 2^7 stored hashes:
//
//	level 16   ●───────────────────────────────●      stored (index 0 covers leaves 0..65535)
//	level 9      ○   ○   ○   …                        computed from 2 level-8 nodes
//	level 8    ● ● ● ● ● ● …                          stored (one per 256 leaves)
//	level 3      ○ ○ ○ …                              computed from 8 leaves
//	level 0    ● ● ● ● ● ● ● ● ● ● ● ● ● ● …          stored (the leaf hashes)
//
// # Proof JSON
//
// Inclusion and consistency proofs have exactly the CONTRACT §10 fields plus a
// trailing "kind"; the frontier proof is this package's own shape (see
// FrontierProof). All hashes print as "blake3:<64 lowercase hex>".
//
// # Checkpoint body
//
// See Checkpoint.Marshal for the byte-exact layout and FrontierLeaf for the
// encoding of a frontier leaf.
package proof
