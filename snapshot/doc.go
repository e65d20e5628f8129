// Package snapshot holds anchordb's snapshot files (the key-value state at a
// frontier, CONTRACT §6), the retention policy (Policy, ParsePolicy, PolicyRef),
// the compaction planner (PlanCompaction) and the audit log of applied
// compactions (Append, ReadAudit, VerifyAudit). It does no replay itself: the
// engine feeds it entries, and proves a snapshot against the log by replaying
// to its frontier and comparing StateHasher's result with the state hash.
// Every file operation goes through a vfs.FS, so tests can crash it.
//
// # Snapshot file
//
// A snapshot is one file: a header, a zstd body, a footer. All integers are
// big-endian and fixed-width.
//
//	header (H bytes; H is stored at offset 10):
//	+--------+---------+-------------+--------+----------+------------+---------+-----------------+-----------------+
//	| magic  | version | compression | H      | created  | policy_ref | anchors | anchors×entry   | header checksum |
//	| 8 B    | u8 = 1  | u8 = 1 zstd | u32    | i64 ns   | 32 B       | u32 n   | (see below)     | 32 B            |
//	+--------+---------+-------------+--------+----------+------------+---------+-----------------+-----------------+
//	 0        8         9             10       14         22           54        58                H-32
//
//	frontier entry (n of them, anchor ids strictly ascending as raw bytes):
//	+-----------+-----------+-----+-----------+
//	| anchorLen | anchor id | seq | head hash |
//	| u8 1–255  | anchorLen | u64 | 32 B      |
//	+-----------+-----------+-----+-----------+
//	seq >= 1 is the last record of the anchor inside the snapshot; head hash
//	is that record's hash. Anchors without records are not listed.
//
//	body (B bytes): one zstd stream whose decompressed bytes are the entries,
//	keys strictly ascending as raw bytes:
//	+--------+-----+--------+-------+-----------+-----+---------+--------+-------------+
//	| keyLen | key | valLen | value | anchorIdx | seq | counter | time   | record hash |
//	| u32 ≥1 |     | u32    |       | u32       | u64 | u64     | i64 ns | 32 B        |
//	+--------+-----+--------+-------+-----------+-----+---------+--------+-------------+
//	(anchorIdx, seq, counter, time, record hash) is the version of the value:
//	the put that set it. anchorIdx indexes the header's frontier (0-based) and
//	seq is at most that anchor's frontier seq. Deleted keys are absent.
//
//	footer (120 bytes, at the end of the file):
//	+----------+-------------+----------+------------+-----------------+-----------+
//	| B        | entry count | raw size | state hash | footer checksum | file hash |
//	| u64      | u64         | u64      | 32 B       | 32 B            | 32 B      |
//	+----------+-------------+----------+------------+-----------------+-----------+
//	raw size is the decompressed length of the body.
//
// The checksums and hashes are BLAKE3 in derive-key mode, each with its own
// context:
//
//   - policy_ref: the raw 32-byte digest of the policy_ref ("blake3:<hex>");
//     all zeros when the snapshot was made without a policy.
//   - header checksum: derive-key(ContextHeader) over header bytes [0, H-32).
//   - state hash: derive-key(ContextState) over the sorted entries, each as
//     u64 keyLen ‖ key ‖ u64 valueLen ‖ value (see StateHasher). It depends on
//     the key→value state alone: not on versions, compression or frontier.
//   - footer checksum: derive-key(ContextFooter) over the header checksum and
//     the footer's first 56 bytes, so a footer cannot be moved to another
//     file, and List can trust entry count and state hash without reading
//     the body.
//   - file hash: derive-key(ContextFile) over every byte before it. Any flipped
//     byte, anywhere, changes it.
//
// Entry count and state hash sit in the footer rather than the header because
// they are known only once every entry has streamed through: the writer makes
// one pass and never seeks back.
//
// # Files and names
//
// A snapshot is named "snapshot-<created, 20-digit Unix ns>-<first 8 bytes of
// the file hash in hex>.snap" inside the directory given to Create (the
// engine uses <db>/snapshots, DirName). Names sort by creation time, which is
// the clock's: List and the planner order snapshots by the records their
// frontiers cover instead (Compare), as a clock can go back. Create
// writes "snapshot-<created>-<random>.snap.tmp", fsyncs it, renames it to its
// final name and fsyncs the directory, so a crash leaves either no snapshot
// or a whole one under the final name; CleanTemp removes leftover .tmp files.
//
// # Audit log
//
// The audit log records every applied compaction action (CONTRACT §6) in
// AuditFileName in the database directory: JSON lines, append-only, each
// line bound to the one before by a hash chain.
//
//	{"seq":1,"time":"2026-01-31T12:00:00.000000001Z","policy_ref":"blake3:…","action":"delete_snapshot","removed":[{"kind":"snapshot","name":"snapshot-….snap","bytes":4096,"hash":"blake3:…"}],"added":[],"prev":"blake3:0000…0000","hash":"blake3:…"}
//
// Fields appear in exactly that order (note, when present, comes just before
// prev). seq is the 1-based line number. prev is the hash of the previous
// line (32 zero bytes for line 1). hash is BLAKE3 derive-key
// (ContextAuditLine) over the line's bytes from the opening '{' up to, not
// including, the final `,"hash":` — so it covers prev, and through it the
// whole log before. A line may carry spaces between its closing '}' and the
// newline (Append pads with them when it overwrites a torn tail); they are
// not hashed.
//
// What the chain detects: an edited line (its hash no longer matches), a
// removed, inserted or reordered line (seq and prev no longer follow). What
// no unkeyed chain detects is the loss of the last lines; VerifyAudit returns
// the head (line count and last hash) so a caller can compare it with a copy
// kept elsewhere, such as a checkpoint. Bytes after the last newline are the
// torn tail of an append cut by a crash: they are reported, not an error,
// and the next Append writes over them.
package snapshot
