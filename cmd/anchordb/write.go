package main

import (
	"io"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/segment"
	"github.com/spf13/pflag"
)

// writeFlags are the flags of every single-record append.
type writeFlags struct {
	fs      *pflag.FlagSet // to tell a flag given from its default
	idem    string
	counter uint64
	noSync  bool
	segSize int64
}

func addWriteFlags(fs *pflag.FlagSet) *writeFlags {
	w := &writeFlags{fs: fs}
	fs.StringVar(&w.idem, "idempotency-key", "", "idempotency key (1–256 bytes, scoped to the anchor): a retry returns the original receipt")
	fs.Uint64Var(&w.counter, "counter", 0, "merge counter to record; must be above the anchor's last (default: the database clock assigns one)")
	fs.BoolVar(&w.noSync, "no-sync", false, "return once the record reaches the OS, without waiting for the fsync")
	segmentSizeFlag(fs, &w.segSize)
	return w
}

func (w *writeFlags) entry(anchor, typ string, key, value []byte) engine.Entry {
	return engine.Entry{Anchor: anchor, Type: typ, Key: key, Value: value,
		IdempotencyKey: []byte(w.idem), Counter: w.counter}
}

// check refuses a flag given with a value out of its range: an empty
// --idempotency-key or a --counter of 0 would otherwise read as not given.
func (w *writeFlags) check(cmd string) error {
	if w.fs.Changed("idempotency-key") && w.idem == "" {
		return usagef(cmd, "--idempotency-key is empty: an idempotency key is 1..%d bytes (omit the flag for none)", segment.DefaultLimits().MaxIdempotencyKey)
	}
	if w.fs.Changed("counter") && w.counter == 0 {
		return usagef(cmd, "--counter 0: a counter is 1..%d (omit the flag to let the database clock assign one)", uint64(engine.MaxCallerCounter))
	}
	return nil
}

func (w *writeFlags) options() []engine.WriteOption {
	if w.noSync {
		return []engine.WriteOption{engine.WithNoSync(true)}
	}
	return nil
}

// appendOne validates the entry before touching the database (so bad input
// creates nothing), appends it and prints the receipt.
func (e *env) appendOne(cmd string, ent engine.Entry, w *writeFlags) error {
	if err := w.check(cmd); err != nil {
		return err
	}
	if err := segment.ValidateContent(ent.Anchor, ent.Type, ent.Key, ent.Value, ent.IdempotencyKey, segment.DefaultLimits()); err != nil {
		return err
	}
	if err := engine.CheckCallerCounter(ent.Counter, len(ent.IdempotencyKey) > 0); err != nil {
		return err
	}
	if err := e.ctx.Err(); err != nil {
		return err // interrupted (e.g. while reading the payload): append nothing
	}
	db, err := e.openOrCreate(w.segSize)
	if err != nil {
		return err
	}
	if err := e.ctx.Err(); err != nil {
		return err
	}
	r, err := db.Append(e.ctx, ent, w.options()...)
	if err != nil {
		return err
	}
	e.print.Receipt(r)
	return nil
}

const receiptHelp = `Prints the receipt: {"anchor","seq","counter","hash","duplicate"}; without --json
one line "ANCHOR #SEQ counter=N blake3:…". A retry with the same --idempotency-key and the
same request prints the original receipt with duplicate=true; the same key with another
request is refused: STATE_002, exit 1, with the original receipt and both fingerprints.
A --counter not above the anchor's last counter is refused: STATE_002, exit 1.`

var putCmd = &command{
	name:    "put",
	args:    "ANCHOR KEY VALUE",
	summary: "append a put of KEY=VALUE to ANCHOR's log",
	detail:  receiptHelp + "\nFor a binary value use: append ANCHOR --type put --key KEY < FILE.",
	minArgs: 3, maxArgs: 3,
	setup: func(fs *pflag.FlagSet) runFunc {
		w := addWriteFlags(fs)
		return func(e *env, args []string) error {
			return e.appendOne("put", w.entry(args[0], segment.TypePut, []byte(args[1]), []byte(args[2])), w)
		}
	},
}

var delCmd = &command{
	name:    "del",
	args:    "ANCHOR KEY",
	summary: "append a delete of KEY to ANCHOR's log",
	detail:  receiptHelp,
	minArgs: 2, maxArgs: 2,
	setup: func(fs *pflag.FlagSet) runFunc {
		w := addWriteFlags(fs)
		return func(e *env, args []string) error {
			return e.appendOne("del", w.entry(args[0], segment.TypeDelete, []byte(args[1]), nil), w)
		}
	},
}

var appendCmd = &command{
	name:    "append",
	args:    "ANCHOR",
	summary: "append a record of --type T with the payload read from stdin (binary-safe)",
	detail: `Any type other than put and delete is an event: its payload is the record's value,
its --key optional, and it has no key-value effect. --type put with --key appends a
put whose value is read from stdin (binary-safe). A delete reads nothing.
` + receiptHelp,
	minArgs: 1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) runFunc {
		var typ, key string
		fs.StringVar(&typ, "type", "", "record type (required): put, delete, or an event name of 1–64 bytes")
		fs.StringVar(&key, "key", "", "the record's key (required for put and delete, optional for events)")
		w := addWriteFlags(fs)
		return func(e *env, args []string) error {
			if typ == "" {
				return usagef("append", "append needs --type")
			}
			if err := segment.ValidateAnchorID(args[0]); err != nil {
				return err
			}
			if err := w.check("append"); err != nil {
				return err
			}
			// Refused before stdin is read: a pipe may not end for a while.
			if err := segment.ValidateType(typ); err != nil {
				return err
			}
			if (typ == segment.TypePut || typ == segment.TypeDelete) && key == "" {
				return usagef("append", "--type %s needs --key", typ)
			}
			var payload []byte
			if typ != segment.TypeDelete {
				var err error
				if payload, err = readPayload(e.stdin, segment.DefaultLimits().MaxValue); err != nil {
					return err
				}
			}
			return e.appendOne("append", w.entry(args[0], typ, []byte(key), payload), w)
		}
	},
}

// readPayload reads r whole, refusing more than limit bytes.
func readPayload(r io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, errs.Wrap(errs.CodeWriteFailed, err, "read the payload from stdin")
	}
	if len(b) > limit {
		return nil, errs.New(errs.CodeInvalidInput, "the payload on stdin is over the value limit of %d bytes", limit)
	}
	return b, nil
}
