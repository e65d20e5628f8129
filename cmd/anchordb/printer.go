package main

import (
	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/outbox"
	"github.com/anchordb/anchordb/proof"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/anchordb/anchordb/tool/demo"
	"github.com/anchordb/anchordb/tool/importer"
)

// printer prints what a command found, in one output mode: lines for a
// person (textPrinter, printer_text.go) or one JSON value a line for a
// program (jsonPrinter, printer_json.go). run chooses it once the flags
// are parsed (newPrinter), so a command hands its result to e.print and
// never asks which mode it runs in; --quiet is the text printer's to
// honour (JSON output is always printed).
//
// A method prints one result whole. A stream (log, merge, …) calls its
// method once a record; the command stops when e.out has failed.
type printer interface {
	benchPrinter // bench.go: the harness's results

	// Receipt is an append's receipt (put, del, append).
	Receipt(r engine.Receipt)
	// Record is one record of history, scan or log.
	Record(r *engine.Record)
	// Found is get's record of the key's live version; NotFound says key
	// has none.
	Found(r *engine.Record)
	NotFound(key []byte)
	// Merged is one record of the merged stream with its position.
	Merged(p engine.Positioned)
	// MergedRoot is merge --root: the root over records, at frontier f.
	MergedRoot(root segment.Hash, records uint64, f merge.Frontier)
	// Verify is verify's report.
	Verify(rep engine.VerifyReport)
	// Keygen is the key pair keygen wrote.
	Keygen(k keyPair)
	// CheckpointCreated is the signed note checkpoint create stored at
	// file; CheckpointVerified the checkpoint checkpoint verify opened.
	CheckpointCreated(note []byte, cp *proof.Checkpoint, file string)
	CheckpointVerified(cp *proof.Checkpoint)
	// Proof is a proof from prove: always its JSON, the output itself.
	Proof(p any)
	// ProofVerified is what verify-proof established.
	ProofVerified(v proofCheck)
	// Ingest is an ingest's report; Import an import's summary.
	Ingest(rep engine.IngestReport)
	Import(s importer.Summary)
	// Stats is stats' report.
	Stats(s statsReport)
	// Compaction is compact's plan, and what applying it did.
	Compaction(res engine.CompactionResult)
	// SnapshotCreated is the snapshot snapshot create wrote.
	SnapshotCreated(info snapshot.Info)
	// SnapshotList is the snapshots in dir, each with whether the audit
	// log records it.
	SnapshotList(dir string, list []snapshot.Info, audited []bool)
	// NoSnapshotsToVerify says dir holds no snapshot for snapshot verify;
	// SnapshotVerified and SnapshotFailed are one snapshot's result.
	NoSnapshotsToVerify(dir string)
	SnapshotVerified(name string, v engine.SnapshotVerification)
	SnapshotFailed(name, path string, err error)
	// SnapshotRetired is what snapshot retire did.
	SnapshotRetired(r engine.RetiredSnapshot)
	// Rebuild is rebuild-index's count, or what its rebuild did.
	Rebuild(r rebuildReport)
	// OutboxEntry is one outbox entry; OutboxInspection one entry with
	// its history; OutboxStats an outbox's health.
	OutboxEntry(en *outbox.Entry)
	OutboxInspection(name string, in *outbox.Inspection)
	OutboxStats(st *outbox.Stats)
	// Version is what this build is and the formats it writes and reads.
	Version(v versionInfo)
	// Demo is the demo's report.
	Demo(r demo.Report)
	// Error reports the error a command ended with; an exitStatus, whose
	// command has printed what it found, prints nothing.
	Error(err error)
}

// newPrinter returns the printer of the mode the global flags chose.
func newPrinter(e *env) printer {
	if e.g.json {
		return &jsonPrinter{out: e.out, text: newTextPrinter(e)}
	}
	return newTextPrinter(e)
}

// newTextPrinter returns the text printer: the output mode without
// --json, and get --raw's whatever --json says.
func newTextPrinter(e *env) *textPrinter {
	return &textPrinter{out: e.out, stderr: e.stderr, quiet: e.g.quiet}
}

// keyPair is a key pair keygen wrote.
type keyPair struct {
	name, verifierKey string
	keyFile, pubFile  string
}

// proofCheck is what verify-proof established: the proof's kind, a
// sentence saying what it proves, and the checkpoint it is bound to (nil
// without --checkpoint).
type proofCheck struct {
	kind, description string
	checkpoint        *proof.Checkpoint
}

// statsReport is what stats prints: the engine's statistics, the damaged
// anchors, and what this command's open recovered.
type statsReport struct {
	stats    engine.Stats
	damaged  []damagedAnchor
	recovery engine.RecoveryReport
}

// damagedAnchor is a read-only anchor and why.
type damagedAnchor struct {
	Anchor string `json:"anchor"`
	Damage string `json:"damage"`
}

// rebuildReport is what rebuild-index counted, and with --apply did.
type rebuildReport struct {
	plan         engine.RebuildPlan
	fromSnapshot bool
	seconds      float64 // the rebuild's time, with --apply
}
