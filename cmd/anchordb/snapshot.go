package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

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

// snapshotInfoJSON is snapshot.Info as the CLI prints it (the shape of its
// JSON tags).
type snapshotInfoJSON snapshot.Info

// unreadableSnapshotJSON is a snapshot file that cannot be read: what its
// name tells, and the error in the CLI's error shape.
type unreadableSnapshotJSON struct {
	Name    string     `json:"name"`
	Path    string     `json:"path"`
	Created *time.Time `json:"created,omitempty"`
	Error   errorBody  `json:"error"`
}

// listedSnapshotJSON is a readable snapshot as list prints it: audited says
// whether the audit log records it as the database's, with the hashes it
// claims.
type listedSnapshotJSON struct {
	snapshotInfoJSON
	Audited bool `json:"audited"`
}

// snapshotJSON is one snapshot of create or list.
func snapshotJSON(info snapshot.Info) any {
	if info.Err != nil {
		out := unreadableSnapshotJSON{Name: info.Name, Path: info.Path, Error: errorJSON(info.Err).Error}
		if !info.Created.IsZero() {
			out.Created = &info.Created
		}
		if out.Error.File == "" {
			out.Error.File = info.Path
		}
		return out
	}
	out := snapshotInfoJSON(info)
	if out.Frontier == nil {
		out.Frontier = snapshot.Frontier{}
	}
	return out
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
	if e.g.json {
		e.out.json(snapshotJSON(info))
		return nil
	}
	if !e.g.quiet {
		e.out.linef("snapshot %s: %s at a frontier of %s and %s, %s, state %s",
			info.Name, plural(info.Entries, "key"), plural(len(info.Frontier), "anchor"), plural(frontierRecords(info.Frontier), "record"), humanBytes(info.Size), info.StateHash)
	} else {
		e.out.linef("%s", info.Name)
	}
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
	if e.g.json {
		for i, s := range list {
			if s.Err != nil {
				e.out.json(snapshotJSON(s))
				continue
			}
			e.out.json(listedSnapshotJSON{snapshotJSON(s).(snapshotInfoJSON), audited[i]})
		}
	} else if len(list) == 0 {
		if !e.g.quiet {
			e.out.linef("no snapshots in %s", db.SnapshotsDir())
		}
	} else {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCREATED\tKEYS\tANCHORS\tRECORDS\tSIZE\tSTATE HASH\tPOLICY\tAUDITED")
		foreign := 0
		for i, s := range list {
			if s.Err != nil {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\tUNREADABLE (%s)\t-\t-\n", s.Name, createdText(s.Created), codeOf(s.Err))
				continue
			}
			policy := s.PolicyRef
			if policy == "" {
				policy = "-"
			}
			yes := "yes"
			if !audited[i] {
				yes = "NO"
				foreign++
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Name, createdText(s.Created), s.Entries, len(s.Frontier),
				frontierRecords(s.Frontier), humanBytes(s.Size), s.StateHash, policy, yes)
		}

		_ = tw.Flush()
		for _, s := range list {
			if s.Err != nil {
				fmt.Fprintf(&b, "unreadable %s: %s\n", s.Name, errorLine(s.Err))
			}
		}
		if foreign > 0 {
			fmt.Fprintf(&b, "%d not in the audit log as the database's (AUDITED NO): compaction neither counts nor deletes them\n", foreign)
		}
		e.out.write([]byte(b.String()))
	}
	if bad > 0 {
		return exitStatus(exitFinding)
	}
	return nil
}

func createdText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// snapshotVerifyJSON is one line of snapshot verify.
type snapshotVerifyJSON struct {
	OK bool `json:"ok"`
	engine.SnapshotVerification
}

// snapshotFailureJSON is a snapshot that failed to verify.
type snapshotFailureJSON struct {
	OK    bool      `json:"ok"`
	Name  string    `json:"name"`
	Path  string    `json:"path"`
	Error errorBody `json:"error"`
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
		if len(targets) == 0 && !e.g.json && !e.g.quiet {
			e.out.linef("no snapshots to verify in %s", db.SnapshotsDir())
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
		bar.update("snapshot verify: %d/%d %s", i+1, len(targets), t.name)
		v, err := db.VerifySnapshot(e.ctx, t.path)
		bar.done()
		if err != nil {
			if e.ctx.Err() != nil {
				return err
			}
			status = max(status, exitCode(err))
			body := errorJSON(err).Error
			if body.File == "" {
				body.File = t.path
			}
			if e.g.json {
				e.out.json(snapshotFailureJSON{OK: false, Name: t.name, Path: t.path, Error: body})
			} else {
				e.out.linef("FAIL %s: %s", t.name, errorLine(err))
			}
			continue
		}
		if e.g.json {
			e.out.json(snapshotVerifyJSON{OK: true, SnapshotVerification: v})
			continue
		}
		if e.g.quiet {
			continue
		}
		unaudited := ""
		if !v.Audited {
			unaudited = "; not in the audit log as the database's: compaction neither counts nor deletes it"
		}
		switch {
		case !v.Replayed:
			e.out.linef("ok   %s: file and state hash verify (%s); %s", t.name, plural(v.Info.Entries, "key"), v.Note)
		case v.Base != "":
			e.out.linef("ok   %s: replay of %s from base %s gives state %s%s", t.name, plural(v.ReplayedRecords, "record"), v.Base, v.ReplayStateHash, unaudited)
		default:
			e.out.linef("ok   %s: replay of %s from genesis gives state %s%s", t.name, plural(v.ReplayedRecords, "record"), v.ReplayStateHash, unaudited)
		}
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
	if e.g.json {
		e.out.json(r)
		return nil
	}
	where := "its file was gone already"
	if r.MovedTo != "" {
		where = "moved to " + r.MovedTo
	}
	e.out.linef("retired %s (%s %s: %s): %s; the audit log records it", r.Name, r.Finding.Code, r.Finding.Reason, r.Finding.Message, where)
	return nil
}
