// Package outbox is a durable outbox and dead-letter queue on an anchordb
// database (CONTRACT §12): promises — "this message will be sent", "this
// settlement will be retried" — kept as hash-chained records that verify,
// prove, merge and ingest like any other data.
//
//	ob, err := outbox.Open(ctx, db, "billing", outbox.Options{})
//	e, err := ob.Enqueue(ctx, outbox.Message{ID: "invoice-7", Payload: body})   // in the request path
//	err = ob.Run(ctx, deliver, outbox.RunOptions{Workers: 16})               // in a delivery loop
//
// An outbox is a client of the engine's public API. Outbox NAME keeps its
// records on the anchor "outbox/NAME", under keys that start with
// KeyPrefix, NAME and a zero byte (the prefix P below):
//
//	key                                   value                              written
//	P 'e' id                              the entry's state (JSON)           one record per transition
//	P 'r' time(8) enqueue_seq(8) id       the entry's record at the mark     pending, by next_attempt_at
//	P 'l' time(8) enqueue_seq(8) id       the entry's record at the mark     inflight, by lease expiry
//	P 'd' time(8) enqueue_seq(8) id       the entry's record at the mark     dead, by dead_at
//	P 'w'                                 {"v","w","counts",…}               the mark
//
// (times are Unix nanoseconds with the sign bit flipped, big-endian, so
// that keys sort by time). Every transition of an entry is one put of its
// 'e' row; the 'r', 'l' and 'd' rows are written in batches by a flush
// and stand at the mark's watermark w: the rows of every entry are those
// of its state after the anchor's records up to seq w, and the mark holds
// the counts by state there. The Outbox keeps the entries changed since in
// memory, and after a crash reads them back from the log past w. So the
// outbox is a projection of its records by construction: rebuild-index
// rebuilds it, ingest carries it, a compaction keeps each key's last
// record and with it every entry's state, and Verify replays the log and
// checks the rows against it. docs/OUTBOX.md has the design in full.
package outbox
