package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/outbox"
	"github.com/anchordb/anchordb/segment"
)

// withOutbox opens the database in dir and its outbox "billing" with the
// Go API, runs f, and closes both (the CLI needs the database closed).
func withOutbox(t *testing.T, dir string, f func(ob *outbox.Outbox)) {
	t.Helper()
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.Open(context.Background(), db, "billing", outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f(ob)
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// anchorSize is the number of records of the outbox's anchor.
func anchorSize(t *testing.T, dir string) uint64 {
	t.Helper()
	r := mustRun(t, "--dir", dir, "--json", "log", "outbox/billing")
	return uint64(strings.Count(r.stdout, "\n"))
}

func TestOutboxCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	payload := filepath.Join(t.TempDir(), "p")
	if err := os.WriteFile(payload, []byte("amount=1"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, "--dir", dir, "--json", "outbox", "billing", "enqueue", "inv-1", "--payload-file", payload,
		"--destination", "https://ledger.example/settle", "--header", "tenant=7")
	e := obj(t, r.stdout)
	if e["state"] != "pending" || e["payload"] != "amount=1" || e["destination"] != "https://ledger.example/settle" ||
		e["lease"] != nil || e["last_error"] != nil || e["superseded_by"] != nil || e["duplicate"] != false {
		t.Fatalf("enqueue: %v", e)
	}
	r = cli(t, []byte("amount=1"), []string{"--dir", dir, "--json", "outbox", "billing", "enqueue", "inv-1", "--payload-file", "-",
		"--destination", "https://ledger.example/settle", "--header", "tenant=7"})
	if r.code != 0 || obj(t, r.stdout)["duplicate"] != true {
		t.Fatalf("retry: %v", r)
	}
	mustRun(t, "--dir", dir, "outbox", "billing", "enqueue", "inv-2")

	// The Go side delivers one, and fails the other for good.
	withOutbox(t, dir, func(ob *outbox.Outbox) {
		ctx := context.Background()
		cs, err := ob.Claim(ctx, "worker-1", 2, time.Minute)
		if err != nil || len(cs) != 2 {
			t.Fatalf("claim: %v %v", cs, err)
		}
		if _, err := ob.Complete(ctx, *cs[0].Lease, []byte("settled")); err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Fail(ctx, *cs[1].Lease, outbox.Permanent(errors.New("unknown customer"))); err != nil {
			t.Fatal(err)
		}
	})

	r = mustRun(t, "--dir", dir, "--json", "outbox", "billing", "stats")
	st := obj(t, r.stdout)
	if st["pending"].(interface{ String() string }).String() != "0" || st["done"].(interface{ String() string }).String() != "1" ||
		st["dead"].(interface{ String() string }).String() != "1" || st["durable"] != true {
		t.Fatalf("stats: %v", st)
	}
	r = mustRun(t, "--dir", dir, "--json", "outbox", "billing", "dead")
	d := obj(t, r.stdout)
	if d["id"] != "inv-2" || d["last_error"].(map[string]any)["permanent"] != true {
		t.Fatalf("dead: %v", d)
	}
	// A done entry: its retry is a duplicate with the result.
	r = cli(t, []byte("amount=1"), []string{"--dir", dir, "--json", "outbox", "billing", "enqueue", "inv-1", "--payload-file", "-",
		"--destination", "https://ledger.example/settle", "--header", "tenant=7"})
	if e := obj(t, r.stdout); r.code != 0 || e["duplicate"] != true || e["state"] != "done" || e["result"] != "settled" {
		t.Fatalf("retry of a done entry: %v", r)
	}
	// A dead one is never retried by itself.
	r = runCLI(t, "--dir", dir, "--json", "outbox", "billing", "enqueue", "inv-2")
	wantExit(t, r, 1)
	if eb := obj(t, r.stdout)["error"].(map[string]any); eb["code"] != "STATE_002" || eb["state"] != "dead" {
		t.Fatalf("enqueue of a dead entry: %v", r)
	}

	r = mustRun(t, "--dir", dir, "--json", "outbox", "billing", "requeue", "inv-2", "--auto", "--by", "alice")
	n := obj(t, r.stdout)
	if n["id"] != "inv-2~1" || n["supersedes"] != "inv-2" || n["state"] != "pending" {
		t.Fatalf("requeue: %v", n)
	}
	r = mustRun(t, "--dir", dir, "--json", "outbox", "billing", "inspect", "inv-2")
	in := obj(t, r.stdout)
	ent := in["entry"].(map[string]any)
	if ent["state"] != "aborted" || ent["aborted_by"] != "alice" || ent["superseded_by"] != "inv-2~1" {
		t.Fatalf("inspect: %v", in)
	}
	var ops []string
	for _, tr := range in["transitions"].([]any) {
		ops = append(ops, tr.(map[string]any)["op"].(string))
	}
	if strings.Join(ops, ",") != "enqueue,claim,fail,requeue" {
		t.Fatalf("transitions %v", ops)
	}
	if ch := in["chain"].([]any); len(ch) != 2 || ch[1] != "inv-2~1" {
		t.Fatalf("chain %v", ch)
	}
	r = mustRun(t, "--dir", dir, "--json", "outbox", "billing", "list", "--state", "pending")
	if l := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(l) != 1 || obj(t, l[0])["id"] != "inv-2~1" {
		t.Fatalf("list: %v", r)
	}
	r = mustRun(t, "--dir", dir, "--json", "outbox", "billing", "list")
	if l := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(l) != 3 {
		t.Fatalf("list of all: %v", r)
	}
	mustRun(t, "--dir", dir, "outbox", "billing", "inspect", "inv-2") // the human form
	mustRun(t, "--dir", dir, "outbox", "billing", "stats")
	r = mustRun(t, "--dir", dir, "--json", "verify")
	if v := obj(t, r.stdout); v["ok"] != true {
		t.Fatalf("verify: %v", v)
	}
}

// TestOutboxBadInput: each refusal exits with its status and code, and
// writes nothing (creates no database where there was none).
func TestOutboxBadInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, outbox.DefaultMaxPayload+1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"oversize id", []string{"outbox", "billing", "enqueue", strings.Repeat("x", outbox.MaxIDBytes+1)}, 2, "INPUT_001"},
		{"oversize payload", []string{"outbox", "billing", "enqueue", "a", "--payload-file", big}, 2, "INPUT_001"},
		{"missing payload file", []string{"outbox", "billing", "enqueue", "a", "--payload-file", big + "-none"}, 2, "INPUT_001"},
		{"bad header", []string{"outbox", "billing", "enqueue", "a", "--header", "novalue"}, 2, "INPUT_001"},
		{"bad outbox name", []string{"outbox", "bad\tname", "enqueue", "a"}, 2, "INPUT_001"},
		{"unknown subcommand", []string{"outbox", "billing", "purge"}, 2, "INPUT_001"},
		{"a flag of another subcommand", []string{"outbox", "billing", "enqueue", "a", "--state", "done"}, 2, "INPUT_001"},
		{"missing id", []string{"outbox", "billing", "enqueue"}, 2, "INPUT_001"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"--dir", dir, "--json"}, c.args...)...)
			wantExit(t, r, c.code)
			if !strings.Contains(r.stdout, c.err) {
				t.Fatalf("want %s: %v", c.err, r)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("a refused command left a database at %s", dir)
			}
		})
	}

	mustRun(t, "--dir", dir, "outbox", "billing", "enqueue", "a")
	withOutbox(t, dir, func(ob *outbox.Outbox) {
		cs, err := ob.Claim(context.Background(), "w", 1, time.Minute)
		if err != nil || len(cs) != 1 {
			t.Fatal(cs, err)
		}
		if _, err := ob.Complete(context.Background(), *cs[0].Lease, nil); err != nil {
			t.Fatal(err)
		}
	})
	mustRun(t, "--dir", dir, "outbox", "billing", "enqueue", "b")
	size := anchorSize(t, dir)
	for _, c := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"unknown state", []string{"outbox", "billing", "list", "--state", "waiting"}, 2, "INPUT_001"},
		{"negative limit", []string{"outbox", "billing", "list", "--limit", "-1"}, 2, "INPUT_001"},
		{"requeue of a done entry", []string{"outbox", "billing", "requeue", "a", "--auto"}, 1, "STATE_002"},
		{"requeue to an id in use", []string{"outbox", "billing", "requeue", "b", "--new-id", "a"}, 1, "STATE_002"},
		{"requeue without a new id", []string{"outbox", "billing", "requeue", "b"}, 2, "INPUT_001"},
		{"requeue with both", []string{"outbox", "billing", "requeue", "b", "--auto", "--new-id", "c"}, 2, "INPUT_001"},
		{"requeue of an unknown id", []string{"outbox", "billing", "requeue", "nobody", "--auto"}, 1, "STATE_003"},
		{"inspect of an unknown id", []string{"outbox", "billing", "inspect", "nobody"}, 1, "STATE_003"},
		{"stats of an unknown outbox", []string{"outbox", "other", "stats"}, 1, "STATE_003"},
		{"enqueue with another payload", []string{"outbox", "billing", "enqueue", "a", "--destination", "x"}, 1, "STATE_002"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"--dir", dir, "--json"}, c.args...)...)
			wantExit(t, r, c.code)
			if !strings.Contains(r.stdout, `"code":"`+c.err+`"`) {
				t.Fatalf("want %s: %v", c.err, r)
			}
			if got := anchorSize(t, dir); got != size {
				t.Fatalf("the outbox's anchor grew from %d to %d records", size, got)
			}
		})
	}
	nodb := filepath.Join(t.TempDir(), "none")
	r := runCLI(t, "--dir", nodb, "--json", "outbox", "billing", "stats")
	wantExit(t, r, 2)
	if _, err := os.Stat(nodb); !os.IsNotExist(err) {
		t.Fatal("stats created a database")
	}
}

// TestVerifyFindsOutboxDamage: a record of another anchor under an outbox's
// key prefix, and an index row the outbox did not write, are findings of
// verify (exit 1), though every hash and link holds.
func TestVerifyFindsOutboxDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	mustRun(t, "--dir", dir, "outbox", "billing", "enqueue", "a")
	db, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := append([]byte(outbox.KeyPrefix+"billing\x00"), "eintruder"...)
	if _, err := db.Put(context.Background(), "someone-else", key, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(context.Background(), engine.Entry{Anchor: "outbox/billing", Type: segment.TypePut,
		Key: append([]byte(outbox.KeyPrefix+"billing\x00"), "r0123456789abcdefx"...), Value: []byte("forged")}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "--dir", dir, "--json", "verify")
	wantExit(t, r, 1)
	v := obj(t, r.stdout)
	if v["ok"] != false {
		t.Fatalf("verify: %v", v)
	}
	var msgs []string
	for _, f := range v["failures"].([]any) {
		fm := f.(map[string]any)
		if fm["code"] != "INT_004" {
			t.Errorf("finding %v, want INT_004", fm)
		}
		msgs = append(msgs, fm["message"].(string))
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, `written by anchor "someone-else"`) || !strings.Contains(all, "is not one of the entry's state") {
		t.Fatalf("findings:\n%s", all)
	}
}
