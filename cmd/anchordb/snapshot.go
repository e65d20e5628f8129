package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/merge"
	"github.com/anchordb/anchordb/snapshot"
	"github.com/spf13/pflag"
)

var snapshotCmd = &command{
	name:    "snapshot",
	args:    "create | list | verify [NAME|PATH]… | retire NAME",
	summary: "take a snapshot of the key-value state, list the snapshots, prove them by replay, or retire a damaged one",
	detail: `snapshot create writes the key-value state at the current frontier to one verifiable
file under the database's snapshots/ directory (--policy F records that policy's
policy_ref in it) and prints its description:
  {"name","path","format","created","policy_ref","frontier":{"anchor":{"seq","hash"}},
   "entries","raw_size","size","state_hash","file_hash","verified"}

snapshot list prints one such object a line per snapshot, oldest first: by the records its
frontier covers, then creation time, as a clock can go back (without --json a table), with
"audited": whether the audit log records it as created, with the hashes it claims — one
of the database's own, which compaction counts; it neither counts nor deletes any other. A
file that cannot be read (or is not a regular file) is listed with "error":{"code","reason","message",
"file"} and makes the command exit 1.

snapshot verify [NAME|PATH]… checks the named snapshots (a file name in snapshots/, or a
path; default: every snapshot): every byte and entry against the file's hashes, then the
replay proof — the log replayed in merged order up to the snapshot's frontier must give
the same state hash. Below a compaction's cut the replay starts from an older snapshot
("base") that the audit log records as created with its hashes; when none covers the cut
no replay is possible ("replayed":false and a "note"), and the snapshot must itself be
one the audit log records with its file and state hashes (INT_003 otherwise).
Prints one object a line: {"ok","snapshot":{…},"base","replayed","note","audited",
"replayed_records","replay_state_hash"} ("audited": the audit log records it as created
with its hashes; one it does not record is proved by its replay all the same, but
compaction neither counts nor deletes it), and for a snapshot that fails {"ok":false,
"name","path","error":{"code":"INT_003",…}}. Any failure exits 1.

snapshot retire NAME takes a snapshot that fails its checks (a file name in snapshots/) out
of the database, audited: a retire_snapshot line in the audit log removes it and names the
finding, then the file moves to lost+found/NAME-<Unix ns>.retired. verify no longer reports
it (a damaged snapshot is kept, and reported by every verify, until an operator does this;
one deleted by hand is reported missing, and retiring its name records the removal). A
snapshot that passes its checks is refused (INPUT_001: compaction deletes good ones).
Prints {"name","finding":{"code","reason","file","offset","message"},"moved_to"}.`,
	minArgs: 1, maxArgs: -1,
	setup: func(fs *pflag.FlagSet) runFunc {
		var policyFile string
		fs.StringVar(&policyFile, "policy", "", "create: record this policy file's policy_ref in the snapshot")
		return func(e *env, args []string) error {
			if err := emptyFlag("snapshot", fs, "policy"); err != nil {
				return err
			}
			switch args[0] {
			case "create":
				if len(args) != 1 {
					return usagef("snapshot", "usage: snapshot create [--policy F]")
				}
				return snapshotCreate(e, policyFile)
			case "list":
				if len(args) != 1 || policyFile != "" {
					return usagef("snapshot", "usage: snapshot list")
				}
				return snapshotList(e)
			case "verify":
				if policyFile != "" {
					return usagef("snapshot", "usage: snapshot verify [NAME|PATH]…")
				}
				return snapshotVerify(e, args[1:])
			case "retire":
				if len(args) != 2 || policyFile != "" {
					return usagef("snapshot", "usage: snapshot retire NAME")
				}
				return snapshotRetire(e, args[1])
			}
			return usagef("snapshot", "unknown snapshot command %q (want create, list, verify or retire)", args[0])
		}
	},
}

func snapshotCreate(e *env, policyFile string) error {
	var ref string
	if policyFile != "" {
		p, err := readPolicy(e, policyFile)
		if err != nil {
			return err
		}
		ref = p.PolicyRef()
	}
	db, err := e.open()
	if err != nil {
		return err
	}
	info, err := db.CreateSnapshot(e.ctx, ref)
	if err != nil {
		return err
	}
	e.print.SnapshotCreated(info)
	return nil
}

// frontierRecords is the number of records a snapshot's frontier covers.
func frontierRecords(f snapshot.Frontier) uint64 {
	return merge.Frontier(f.Seqs()).Total()
}

func snapshotList(e *env) error {
	db, err := e.openRead()
	if err != nil {
		return err
	}
	list, err := db.Snapshots(e.ctx)
	if err != nil {
		return err
	}
	audited, err := db.SnapshotsAudited(e.ctx, list)
	if err != nil {
		return err
	}
	bad := 0
	for _, s := range list {
		if s.Err != nil {
			bad++
		}
	}
	e.print.SnapshotList(db.SnapshotsDir(), list, audited)
	if bad > 0 {
		return exitStatus(exitFinding)
	}
	return nil
}

func snapshotVerify(e *env, names []string) error {
	db, err := e.openRead()
	if err != nil {
		return err
	}
	type target struct{ name, path string }
	var targets []target
	if len(names) == 0 {
		list, err := db.Snapshots(e.ctx)
		if err != nil {
			return err
		}
		for _, s := range list {
			targets = append(targets, target{s.Name, s.Path})
		}
		if len(targets) == 0 {
			e.print.NoSnapshotsToVerify(db.SnapshotsDir())
		}
	} else {
		for _, n := range names {
			p, err := snapshotPath(db, n)
			if err != nil {
				return err
			}
			targets = append(targets, target{filepath.Base(p), p})
		}
	}
	status := exitOK
	bar := e.newProgress()
	for i, t := range targets {
		bar.Update("snapshot verify: %d/%d %s", i+1, len(targets), t.name)
		v, err := db.VerifySnapshot(e.ctx, t.path)
		bar.Done()
		if err != nil {
			if e.ctx.Err() != nil {
				return err
			}
			status = max(status, exitCode(err))
			e.print.SnapshotFailed(t.name, t.path, err)
			continue
		}
		e.print.SnapshotVerified(t.name, v)
	}
	if status != exitOK {
		return exitStatus(status)
	}
	return nil
}

// snapshotPath resolves a snapshot argument: a path to an existing file, or
// the name of a file in the database's snapshots directory.
func snapshotPath(db *engine.DB, arg string) (string, error) {
	if arg == "" {
		return "", usagef("snapshot", "a snapshot name must not be empty")
	}
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		// NB: the engine opens the path without a context: a FIFO would
		// block it (SIGINT caught, the lock held) and a device be read as
		// a snapshot. A snapshot is a regular file.
		if !st.Mode().IsRegular() {
			return "", errs.New(errs.CodeInvalidInput, "%s is not a regular file, so not a snapshot", arg)
		}
		return arg, nil
	}
	if !strings.ContainsRune(arg, os.PathSeparator) {
		name := arg
		if !strings.HasSuffix(name, snapshot.Ext) {
			name += snapshot.Ext
		}
		p := filepath.Join(db.SnapshotsDir(), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errs.New(errs.CodeInvalidInput, "no snapshot %q (neither a file nor a name in %s)", arg, db.SnapshotsDir())
}

// snapshotRetire retires a snapshot that fails its checks (engine.DB.RetireSnapshot).
func snapshotRetire(e *env, name string) error {
	db, err := e.open()
	if err != nil {
		return err
	}
	r, err := db.RetireSnapshot(e.ctx, filepath.Base(name))
	if err != nil {
		return err
	}
	e.print.SnapshotRetired(r)
	return nil
}
