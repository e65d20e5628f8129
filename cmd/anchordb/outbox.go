package main

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/outbox"
	"github.com/spf13/pflag"
)

var outboxCmd = &command{
	name:    "outbox",
	args:    "NAME enqueue ID | list | inspect ID | requeue ID | stats | dead",
	summary: "the outbox NAME: enqueue a promise, list, inspect, requeue, its health, its dead letters",
	detail: `An outbox is a durable queue of promises kept as records on the anchor "outbox/NAME"
(docs/OUTBOX.md). Applications enqueue and deliver with the Go package outbox; the CLI
enqueues, looks and repairs.

outbox NAME enqueue ID [--payload-file F|-] [--destination D] [--header K=V]…
  enqueues a promise under the id ID (the idempotency key), with the payload read from
  F (- for stdin; none: an empty payload). A retry of the same id with the same payload
  and metadata prints the entry as it is with "duplicate":true (a done one with its
  result) and writes nothing; the same id with another payload, or a dead or aborted
  entry, is STATE_002 (exit 1) with the entry's state. Creates the database if needed.
outbox NAME list [--state S] [--limit N]
  entries, one a line: pending ones by next_attempt_at, inflight ones by lease expiry,
  dead ones by dead_at; done and aborted ones, and all (no --state), by id.
outbox NAME inspect ID
  the entry, every transition the index holds with its record's receipt, and the chain
  of requeues through it: {"outbox","id","entry":{…},"transitions":[{"op","at","by",
  "token","from","to","entry":{…}}],"chain":["ID",…]}.
outbox NAME requeue ID (--new-id X | --auto) [--patch-payload F] [--by WHO]
  gives a dead or pending entry a successor under a fresh id in one atomic append: the
  entry becomes aborted (superseded_by, aborted_at, aborted_by: --by, default $USER),
  the successor is pending with its payload (or F's). Prints the successor.
outbox NAME stats
  {"outbox","pending","inflight","done","dead","aborted","oldest_pending_age_ms",
  "oldest_dead_age_ms","inflight_leases","expired_leases","durable","watermark",
  "unflushed"}.
outbox NAME dead [--limit N]
  the dead letters, oldest first, one a line.

An entry prints as {"outbox","id","state","attempts","next_attempt_at","fingerprint",
"lease","last_error","superseded_by","supersedes","duplicate","enqueued_at","enqueue_seq",
"payload","payload_size","destination","headers","result","done_at","dead_at",
"aborted_at","aborted_by","receipt"} (absent values null; "payload" null once a done or
aborted entry left it out). The commands but enqueue and requeue write nothing; on an
outbox the database does not hold they are STATE_003 (exit 1).`,
	minArgs: 2, maxArgs: 3,
	setup: func(fs *pflag.FlagSet) runFunc {
		f := &outboxFlags{fs: fs}
		fs.StringVar(&f.payloadFile, "payload-file", "", "enqueue: read the payload from this file (- for stdin)")
		fs.StringVar(&f.destination, "destination", "", "enqueue: where the promise goes (metadata for the handler)")
		fs.StringArrayVar(&f.headers, "header", nil, "enqueue: a header NAME=VALUE (repeatable)")
		fs.StringVar(&f.state, "state", "", "list: only entries in this state (pending, inflight, done, dead, aborted)")
		fs.IntVar(&f.limit, "limit", 1000, "list, dead: at most this many entries (0: all)")
		fs.StringVar(&f.newID, "new-id", "", "requeue: the successor's id")
		fs.BoolVar(&f.auto, "auto", false, "requeue: name the successor ID~1 (ID~2 for ID~1, …)")
		fs.StringVar(&f.patchFile, "patch-payload", "", "requeue: the successor's payload, from this file (- for stdin)")
		fs.StringVar(&f.by, "by", "", "requeue: who requeues, recorded as aborted_by (default $USER)")
		fs.BoolVar(&f.noSync, "no-sync", false, "enqueue, requeue: return once the record reaches the OS, without waiting for the fsync")
		return func(e *env, args []string) error { return runOutbox(e, f, args) }
	},
}

type outboxFlags struct {
	fs          *pflag.FlagSet
	payloadFile string
	destination string
	headers     []string
	state       string
	limit       int
	newID       string
	auto        bool
	patchFile   string
	by          string
	noSync      bool
}

// outboxSubs says which flags each subcommand takes and how many
// arguments after it.
var outboxSubs = map[string]struct {
	args  int
	flags []string
}{
	"enqueue": {1, []string{"payload-file", "destination", "header", "no-sync"}},
	"list":    {0, []string{"state", "limit"}},
	"inspect": {1, nil},
	"requeue": {1, []string{"new-id", "auto", "patch-payload", "by", "no-sync"}},
	"stats":   {0, nil},
	"dead":    {0, []string{"limit"}},
}

func runOutbox(e *env, f *outboxFlags, args []string) error {
	name, sub := args[0], args[1]
	spec, ok := outboxSubs[sub]
	if !ok {
		return usagef("outbox", "unknown outbox command %q (want enqueue, list, inspect, requeue, stats or dead)", sub)
	}
	if len(args)-2 != spec.args {
		return usagef("outbox", "outbox NAME %s takes %d argument(s) after it (got %d)", sub, spec.args, len(args)-2)
	}
	for _, fl := range []string{"payload-file", "destination", "header", "state", "limit", "new-id", "auto", "patch-payload", "by", "no-sync"} {
		if f.fs.Changed(fl) && !slices.Contains(spec.flags, fl) {
			return usagef("outbox", "--%s does not apply to outbox %s", fl, sub)
		}
	}
	if err := emptyFlag("outbox", f.fs, "payload-file", "patch-payload", "new-id", "state"); err != nil {
		return err
	}
	if err := outbox.ValidateName(name); err != nil {
		return err
	}
	if f.limit < 0 {
		return usagef("outbox", "--limit must not be negative")
	}
	switch sub {
	case "enqueue":
		return outboxEnqueue(e, f, name, args[2])
	case "requeue":
		return outboxRequeue(e, f, name, args[2])
	}
	var state outbox.State
	if f.state != "" {
		s, err := outbox.ParseState(f.state)
		if err != nil {
			return err
		}
		state = s
	}
	if sub == "inspect" {
		if err := outbox.ValidateID(args[2]); err != nil {
			return err
		}
	}
	ob, err := openOutboxCLI(e, name, false, false)
	if err != nil {
		return err
	}
	defer ob.Close()
	switch sub {
	case "list", "dead":
		if sub == "dead" {
			state = outbox.StateDead
		}
		es, err := ob.List(e.ctx, outbox.ListOptions{State: state, Limit: f.limit})
		if err != nil {
			return err
		}
		for i := range es {
			e.print.OutboxEntry(&es[i])
		}
		return nil
	case "inspect":
		in, err := ob.Inspect(e.ctx, args[2])
		if err != nil {
			return err
		}
		e.print.OutboxInspection(name, &in)
		return nil
	default: // stats
		st, err := ob.Stats(e.ctx)
		if err != nil {
			return err
		}
		e.print.OutboxStats(&st)
		return nil
	}
}

// openOutboxCLI opens the database and the outbox: for writing (creating the
// database if needed), or read-only, where an outbox the database does not
// hold is STATE_003.
func openOutboxCLI(e *env, name string, write, noSync bool) (*outbox.Outbox, error) {
	var db *engine.DB
	var err error
	if write {
		db, err = e.openOrCreate(0)
	} else {
		db, err = e.open()
	}
	if err != nil {
		return nil, err
	}
	if !write {
		if _, found, err := db.AnchorInfo(e.ctx, outbox.AnchorPrefix+name); err != nil {
			return nil, err
		} else if !found {
			return nil, errs.New(errs.CodeDependencyMissing, "the database holds no outbox %q", name)
		}
	}
	return outbox.Open(e.ctx, db, name, outbox.Options{ReadOnly: !write, NoSync: noSync, Clock: engineClock})
}

// readPayloadFile reads a payload of at most limit bytes from path, or
// from stdin for "-".
func readPayloadFile(e *env, path string, limit int) ([]byte, error) {
	if path == "-" {
		b, err := io.ReadAll(io.LimitReader(e.stdin, int64(limit)+1))
		if err != nil {
			if e.ctx.Err() != nil {
				return nil, err
			}
			return nil, errs.Wrap(errs.CodeWriteFailed, err, "read the payload from stdin")
		}
		if len(b) > limit {
			return nil, errs.New(errs.CodeInvalidInput, "the payload on stdin is over the outbox's payload limit of %d bytes", limit)
		}
		return b, nil
	}
	f, in, _, err := openInput(e.ctx, path)
	if err != nil {
		if e.ctx.Err() != nil {
			return nil, err
		}
		if engine.CodeOf(err) != "" {
			return nil, err
		}
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "read the payload file")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(in, int64(limit)+1))
	if err != nil {
		if e.ctx.Err() != nil {
			return nil, err
		}
		return nil, errs.Wrap(errs.CodeInvalidInput, err, "read the payload file %s", path)
	}
	if len(b) > limit {
		return nil, errs.New(errs.CodeInvalidInput, "the payload file %s is over the outbox's payload limit of %d bytes", path, limit)
	}
	return b, nil
}

func outboxEnqueue(e *env, f *outboxFlags, name, id string) error {
	m := outbox.Message{ID: id, Destination: f.destination}
	if err := outbox.ValidateID(id); err != nil {
		return err
	}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return usagef("outbox", "--header %q is not NAME=VALUE", h)
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		if _, dup := m.Headers[k]; dup {
			return usagef("outbox", "--header %q given twice", k)
		}
		m.Headers[k] = v
	}
	if f.payloadFile != "" {
		b, err := readPayloadFile(e, f.payloadFile, outbox.DefaultMaxPayload)
		if err != nil {
			return err
		}
		m.Payload = b
	}
	if err := e.ctx.Err(); err != nil {
		return err
	}
	ob, err := openOutboxCLI(e, name, true, f.noSync)
	if err != nil {
		return err
	}
	en, err := ob.Enqueue(e.ctx, m)
	if cerr := ob.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	e.print.OutboxEntry(&en)
	return nil
}

func outboxRequeue(e *env, f *outboxFlags, name, id string) error {
	if err := outbox.ValidateID(id); err != nil {
		return err
	}
	if f.auto == (f.newID != "") {
		return usagef("outbox", "outbox NAME requeue ID needs exactly one of --new-id X and --auto")
	}
	opts := []outbox.RequeueOption{outbox.AutoID}
	if f.newID != "" {
		if err := outbox.ValidateID(f.newID); err != nil {
			return err
		}
		opts = []outbox.RequeueOption{outbox.NewID(f.newID)}
	}
	if f.patchFile != "" {
		b, err := readPayloadFile(e, f.patchFile, outbox.DefaultMaxPayload)
		if err != nil {
			return err
		}
		opts = append(opts, outbox.PatchPayload(b))
	}
	by := f.by
	if !f.fs.Changed("by") {
		by = os.Getenv("USER")
		if u, err := user.Current(); by == "" && err == nil {
			by = u.Username
		}
	}
	opts = append(opts, outbox.By(by))
	if err := e.ctx.Err(); err != nil {
		return err
	}
	// Requeue writes, but only to an outbox the database holds.
	if err := isDatabase(e.g.dir); err != nil {
		return err
	}
	ob, err := openOutboxCLI(e, name, true, f.noSync)
	if err != nil {
		return err
	}
	en, err := ob.Requeue(e.ctx, id, opts...)
	if cerr := ob.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	e.print.OutboxEntry(&en)
	return nil
}

// verifyOutboxes checks every outbox among the anchors verified (all, or
// those --anchor names) against its log, adding what outbox.Verify finds to
// the report.
func verifyOutboxes(e *env, db *engine.DB, rep *engine.VerifyReport, only []string) error {
	var names []string
	if len(only) > 0 {
		for _, a := range only {
			if n, ok := strings.CutPrefix(a, outbox.AnchorPrefix); ok {
				names = append(names, n)
			}
		}
	} else {
		for info, err := range db.Anchors(e.ctx) {
			if err != nil {
				return err
			}
			if n, ok := strings.CutPrefix(info.ID, outbox.AnchorPrefix); ok {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		if outbox.ValidateName(n) != nil {
			continue
		}
		orep, err := outbox.Verify(e.ctx, db, n)
		if err != nil {
			return err
		}
		for _, f := range orep.Failures {
			msg := fmt.Sprintf("outbox %q", f.Outbox)
			if f.ID != "" {
				msg += fmt.Sprintf(" entry %q", f.ID)
			}
			rep.Failures = append(rep.Failures, engine.Finding{Code: f.Code, Reason: f.Reason, Anchor: f.Anchor, Seq: f.Seq, Message: msg + ": " + f.Message})
		}
		if !orep.OK {
			rep.OK = false
		}
	}
	return nil
}
