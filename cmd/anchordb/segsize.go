package main

import "github.com/spf13/pflag"

// segmentSizeFlag registers --segment-size on a command that appends (put,
// del, append, import, ingest). The engine seals an anchor's active segment
// when the next record would take it past this size, and only a sealed
// segment can be snapshotted below and truncated; the database does not
// keep the size, so it applies to the segments this run writes.
func segmentSizeFlag(fs *pflag.FlagSet, v *int64) {
	fs.Int64Var(v, "segment-size", 0, "seal an anchor's segment at this many bytes, 1024..2^40 (default 64 MiB); the database does not keep it: it applies to what this run appends")
}
