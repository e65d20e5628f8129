// Command anchordb is the command line of the anchordb engine (CONTRACT §10).
//
// It is thin: it parses flags, calls the engine and prints. Every command is
// one entry of the commands table below — its name, arguments, summary and a
// setup function that registers its flags and returns the function that runs
// it — so adding a command is a new file and one line in the table. A command
// hands what it found to e.print, the printer of the output mode --json chose
// (printer.go): printer_text.go prints for a person, printer_json.go the
// JSON shapes; no command asks which mode it runs in.
//
// Global flags (--dir, --json, --quiet, --no-progress) are accepted before or
// after the command: each command's pflag FlagSet registers them too and
// parses interspersed flags and arguments.
//
// Exit status: 0 ok; 1 an integrity or conflict finding (a refused append,
// a get of a missing key, INT_*, AUTH_*); 2 usage, I/O or bad input. An error
// prints {"error":{"code","reason","message",…}} on stdout with --json, else
// one line on stderr (also with --json when stdout itself has failed).
//
// SIGINT or SIGTERM cancels the command, which stops at its next check,
// closes the database cleanly and exits 2 (IO_001 "interrupted"); a second
// one while it stops exits at once, also 2 (see interruptContext).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/internal/errs"
	"github.com/anchordb/anchordb/internal/humanize"
	"github.com/anchordb/anchordb/segment"
	"github.com/spf13/pflag"
)

// Exit statuses (CONTRACT §10).
const (
	exitOK      = 0
	exitFinding = 1 // an integrity or conflict finding
	exitUsage   = 2 // usage, I/O or bad input
)

// command is one entry of the command table.
type command struct {
	name    string
	args    string // the positional arguments, for usage: "ANCHOR KEY VALUE"
	summary string
	// detail is printed by `anchordb help NAME` after the summary.
	detail string
	// minArgs and maxArgs bound the positional arguments; maxArgs < 0: no bound.
	minArgs, maxArgs int
	// setup registers the command's own flags on fs and returns its run
	// function, which reads them through the closure.
	setup func(fs *pflag.FlagSet) runFunc
}

type runFunc func(e *env, args []string) error

// commands is the command table, in the order help lists them.
var commands = []*command{
	putCmd,
	delCmd,
	appendCmd,
	importCmd,
	getCmd,
	historyCmd,
	scanCmd,
	logCmd,
	mergeCmd,
	verifyCmd,
	keygenCmd,
	checkpointCmd,
	proveCmd,
	verifyProofCmd,
	ingestCmd,
	snapshotCmd,
	compactCmd,
	rebuildIndexCmd,
	statsCmd,
	outboxCmd,
	benchCmd,
	demoCmd,
	versionCmd,
}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// globals are the flags every command accepts.
type globals struct {
	dir        string
	dirSet     bool // --dir was given explicitly
	json       bool
	quiet      bool
	noProgress bool
	readOnly   bool
}

func defaultDir() string {
	if d := os.Getenv("ANCHORDB_DIR"); d != "" {
		return d
	}
	return "./anchordb-data"
}

func (g *globals) register(fs *pflag.FlagSet) {
	fs.StringVar(&g.dir, "dir", "", "database directory (default $ANCHORDB_DIR, else ./anchordb-data)")
	fs.BoolVar(&g.json, "json", false, "machine-readable JSON output on stdout")
	fs.BoolVar(&g.quiet, "quiet", false, "suppress non-essential output (JSON output is always printed)")
	fs.BoolVar(&g.noProgress, "no-progress", false, "never draw progress on stderr (it is drawn only on a terminal)")
	fs.BoolVar(&g.readOnly, "read-only", false, "open without the write lock and write nothing (reads choose it when the directory is not writable or another process holds the database)")
}

func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by run, in the --json shape when asked
	fs.Usage = func() {}
	fs.SortFlags = false
	fs.SetInterspersed(true)
	return fs
}

// usageError is a command line the CLI cannot run: INPUT_001, exit 2.
type usageError struct {
	cmd string // the command it concerns, "" for the top level
	msg string
}

func (u *usageError) Error() string { return u.msg }

// Unwrap gives the error its code, so CodeOf and the JSON shape see INPUT_001.
func (u *usageError) Unwrap() error { return errs.New(errs.CodeInvalidInput, "%s", u.msg) }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// exitStatus ends a command with a status and no further message: the command
// has already printed what it found (e.g. get of a missing key).
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// exitCode maps an error to the exit status of CONTRACT §10 through its code.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var s exitStatus
	if errors.As(err, &s) {
		return int(s)
	}
	var u *usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	code := engine.CodeOf(err)
	switch {
	case code.IsIntegrity():
		return exitFinding
	case code == errs.CodeConflict, code == errs.CodeDependencyMissing:
		return exitFinding
	case strings.HasPrefix(string(code), "CAP_"): // a refused append
		return exitFinding
	default: // INPUT_001, IO_001, STATE_001, and errors without a code
		return exitUsage
	}
}

func main() {
	// Report a closed stdout as an error (and stop) instead of dying by
	// SIGPIPE with the database open.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := interruptContext(os.Stderr)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// interruptContext returns a context that the first SIGINT or SIGTERM
// cancels: the command stops at its next check and closes the database
// cleanly (an interrupted command exits 2, IO_001 "interrupted"). A second
// one while the first is being handled ends the process at once, with exit
// status 2 (CONTRACT §10 has no other status for it; an interrupt is an I/O
// failure to the caller either way) and a line on stderr: for a process the
// first could not stop, such as one blocked in a system call that no
// context reaches. The database is then not closed; the kernel drops its
// lock, and the next open recovers it as after a crash. stop ends the
// watch.
func interruptContext(stderr io.Writer) (ctx context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		cancel()
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "anchordb: second %s: exiting at once, without closing the database (the next open recovers it)\n", signalName(s))
			os.Exit(exitUsage)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// signalName names SIGINT and SIGTERM as a shell user knows them.
func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// run runs one command line and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{}
	// Reads of stdin end when ctx does (an interrupt), even while it idles.
	e := &env{ctx: ctx, g: g, stdin: newCtxReader(ctx, stdin), stderr: stderr, out: newOutput(stdout)}

	// Find the command: global flags may come first.
	pre := newFlagSet("anchordb")
	g.register(pre)
	showVersion := pre.Bool("version", false, "print the version and exit (as the version command)")
	pre.SetInterspersed(false)
	err := pre.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprint(stdout, mainUsage())
		return exitOK
	}
	if err != nil {
		g.json = jsonRequested(args)
		return e.finish(usagef("", "%s", flagText(err)))
	}
	if *showVersion {
		e.print = newPrinter(e)
		e.print.Version(buildVersion())
		return e.finish(nil)
	}
	rest := pre.Args()
	// Flags after the command are not parsed yet: an error about the command
	// itself must still honour a --json among them.
	g.json = g.json || jsonRequested(args)
	if len(rest) == 0 {
		fmt.Fprint(stderr, mainUsage())
		return e.finish(usagef("", "no command given"))
	}
	name := rest[0]
	globalArgs := args[:len(args)-len(rest)]
	// A "--" that ended the global flags is not passed on; one that was a
	// flag's value (--dir --) is.
	if n := len(globalArgs); n > 0 && globalArgs[n-1] == "--" && pre.ArgsLenAtDash() >= 0 {
		globalArgs = globalArgs[:n-1]
	}
	cmdArgs := append(append([]string(nil), globalArgs...), rest[1:]...)

	if name == "help" {
		return runHelp(e, cmdArgs, stdout)
	}
	cmd := lookupCommand(name)
	if cmd == nil {
		fmt.Fprint(stderr, mainUsage())
		return e.finish(usagef("", "unknown command %q", name))
	}

	own, global := newFlagSet(name), newFlagSet(name)
	runCmd := cmd.setup(own)
	g.register(global)
	fs := newFlagSet(name)
	fs.AddFlagSet(own)
	fs.AddFlagSet(global)
	err = fs.Parse(cmdArgs)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprint(stdout, commandUsage(cmd))
		return exitOK
	}
	if err != nil {
		g.json = jsonRequested(cmdArgs)
		return e.finish(usagef(name, "%s", flagText(err)))
	}
	g.dirSet = fs.Changed("dir")
	if g.dirSet && g.dir == "" {
		return e.finish(usagef(name, "--dir must not be empty"))
	}
	if g.dir == "" {
		g.dir = defaultDir()
	}
	pos := fs.Args()
	if len(pos) < cmd.minArgs || (cmd.maxArgs >= 0 && len(pos) > cmd.maxArgs) {
		return e.finish(usagef(name, "%s takes %s (got %s)", name, argsWanted(cmd), humanize.Plural(len(pos), "argument")))
	}
	e.print = newPrinter(e)
	err = runCmd(e, pos)
	return e.finish(err)
}

// jsonRequested reports whether args turn --json on, for reporting a flag
// error that stopped parsing before --json was reached. It reads --json as
// pflag does: a value after '=' in any spelling strconv.ParseBool accepts,
// the last one winning, nothing after "--".
func jsonRequested(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" {
			on = true
		} else if v, ok := strings.CutPrefix(a, "--json="); ok {
			if b, err := strconv.ParseBool(v); err == nil {
				on = b
			}
		}
	}
	return on
}

// emptyFlag refuses a flag naming a file that was given with an empty value
// (as a script passing an unset variable gives it): read as not given, it
// would silently change what the command does — verify --pub "" would
// check no signature and still say ok, get --at "" answer from the current
// state.
func emptyFlag(cmd string, fs *pflag.FlagSet, names ...string) error {
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && f.Changed && f.Value.String() == "" {
			return usagef(cmd, "--%s must not be empty", n)
		}
	}
	return nil
}

func argsWanted(c *command) string {
	if c.args == "" {
		return "no arguments"
	}
	return c.args
}

// finish prints err (if any), flushes the output, closes the database and
// returns the exit status.
func (e *env) finish(err error) int {
	if err != nil && errors.Is(err, context.Canceled) && e.ctx.Err() != nil {
		err = errs.Wrap(errs.CodeWriteFailed, err, "interrupted")
	}
	if e.print == nil { // the command line did not parse: --json as far as it was read
		e.print = newPrinter(e)
	}
	if err != nil && !e.out.brokenPipe(err) {
		e.print.Error(err)
	}
	if ferr := e.out.flush(); ferr != nil && err == nil && !e.out.brokenPipe(ferr) {
		err = errs.Wrap(errs.CodeWriteFailed, ferr, "write output")
		fmt.Fprintf(e.stderr, "anchordb: %v\n", err)
	}
	if cerr := e.closeDB(err != nil && !e.out.brokenPipe(err)); cerr != nil {
		if err == nil || exitCode(err) == exitOK {
			err = cerr
		}
		e.print.Error(cerr)
		_ = e.out.flush()
	}
	if err != nil && e.out.brokenPipe(err) {
		// The reader of stdout went away (e.g. `anchordb log a | head -1`):
		// it has what it wanted.
		return exitOK
	}
	return exitCode(err)
}

func runHelp(e *env, args []string, stdout io.Writer) int {
	// `help` takes at most a command name; global flags may surround it.
	fs := newFlagSet("help")
	(&globals{}).register(fs)
	if err := fs.Parse(args); err != nil && !errors.Is(err, pflag.ErrHelp) {
		return e.finish(usagef("", "%v", err))
	}
	names := fs.Args()
	switch {
	case len(names) == 0 || (len(names) == 1 && names[0] == "help"):
		fmt.Fprint(stdout, mainUsage())
		return exitOK
	case len(names) == 1 && lookupCommand(names[0]) != nil:
		fmt.Fprint(stdout, commandUsage(lookupCommand(names[0])))
		return exitOK
	default:
		fmt.Fprint(e.stderr, mainUsage())
		return e.finish(usagef("", "no help for %q: unknown command", strings.Join(names, " ")))
	}
}

// usageColumn is the widest synopsis ("name args") that shares its line
// with the summary in the command list; a wider one gets a line of its own.
const usageColumn = 30

func mainUsage() string {
	var b strings.Builder
	b.WriteString("anchordb — an embedded, verifiable key-value store of hash-chained anchor logs\n\n")
	b.WriteString("usage: anchordb [global flags] COMMAND [arguments] [flags]\n\ncommands:\n")
	width := 0
	for _, c := range commands {
		if n := utf8.RuneCountInString(synopsis(c)); n <= usageColumn {
			width = max(width, n)
		}
	}
	for _, c := range commands {
		if s := synopsis(c); utf8.RuneCountInString(s) > width {
			fmt.Fprintf(&b, "  %s\n  %-*s  %s\n", s, width, "", c.summary)
		} else {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, s, c.summary)
		}
	}
	b.WriteString("\nglobal flags (before or after the command):\n")
	b.WriteString(globalFlagUsages())
	b.WriteString("\nexit status: 0 ok; 1 an integrity or conflict finding (refused append, missing key);\n")
	b.WriteString("2 usage, I/O or bad input.\n\n")
	b.WriteString("SIGINT or SIGTERM stops a command cleanly (exit 2, IO_001 interrupted); a second one\n")
	b.WriteString("while it stops exits at once (exit 2), leaving the database for the next open to recover.\n\n")
	b.WriteString("Run 'anchordb help COMMAND' for a command's flags; 'anchordb --version' is 'anchordb version'.\n")
	return b.String()
}

// synopsis is a command's name and arguments: "put ANCHOR KEY VALUE".
func synopsis(c *command) string { return strings.TrimSpace(c.name + " " + c.args) }

func globalFlagUsages() string {
	fs := newFlagSet("anchordb")
	(&globals{}).register(fs)
	return fs.FlagUsages()
}

func commandUsage(c *command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: anchordb %s [flags]\n\n%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	if c.detail != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(c.detail, "\n"))
	}
	own := newFlagSet(c.name)
	c.setup(own)
	if own.HasFlags() {
		b.WriteString("\nflags:\n")
		b.WriteString(own.FlagUsages())
	}
	b.WriteString("\nglobal flags:\n")
	b.WriteString(globalFlagUsages())
	return b.String()
}

// env is what a running command needs: context, flags, streams, database.
type env struct {
	ctx    context.Context
	g      *globals
	stdin  io.Reader
	stderr io.Writer
	out    *output
	print  printer // the output mode's (newPrinter), once the flags are parsed
	db     *engine.DB
}

// open opens the existing database in --dir; a directory that does not
// exist or holds no database is INPUT_001 and is left as it is (a command
// that reads must not create a database). The database is closed when the
// command returns.
func (e *env) open() (*engine.DB, error) {
	if e.db == nil {
		if err := isDatabase(e.g.dir); err != nil {
			return nil, err
		}
	}
	return e.openWith(engine.Options{})
}

// isDatabase checks that dir holds an anchordb database (its DBID file or
// its anchors directory), so that a command that only reads, a dry run or
// a rebuild never creates one.
func isDatabase(dir string) error {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return errs.New(errs.CodeInvalidInput, "--dir %s is not a directory", dir)
	} else if errors.Is(err, syscall.ENOTDIR) {
		return errs.New(errs.CodeInvalidInput, "--dir %s is not a directory: a part of its path is a file", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, engine.IDFile)); err == nil {
		return nil
	}
	if st, err := os.Stat(filepath.Join(dir, segment.AnchorsDir)); err == nil && st.IsDir() {
		return nil
	}
	return errs.New(errs.CodeInvalidInput, "no anchordb database at %s", dir)
}

// openRead opens the existing database in --dir for a command that only
// reads (get, history, scan, log, merge, prove, verify, stats, snapshot list
// and verify, a compaction's plan). It opens read-only (engine
// Options.ReadOnly: no lock taken, nothing written) with --read-only, when
// this user cannot write the directory, and when another process holds the
// write lock: then verify, log and prove read the files, and the reads that
// need the index say which process holds it (STATE_001). Otherwise it opens
// as a writer does, so a database a crash left is recovered first.
func (e *env) openRead() (*engine.DB, error) {
	if e.db != nil {
		return e.db, nil
	}
	if err := isDatabase(e.g.dir); err != nil {
		return nil, err
	}
	if e.g.readOnly || !writableDir(e.g.dir) {
		return e.openWith(engine.Options{ReadOnly: true})
	}
	db, err := e.openWith(engine.Options{})
	if err != nil && (engine.CodeOf(err) == errs.CodeScopeLocked || isPermission(err)) {
		return e.openWith(engine.Options{ReadOnly: true})
	}
	return db, err
}

// openOrCreate opens the database in --dir, creating a fresh one if there is
// none: for the commands that write (put, del, append, import, ingest).
// segmentSize (0: the engine's default) is what their --segment-size says.
func (e *env) openOrCreate(segmentSize int64) (*engine.DB, error) {
	return e.openWith(engine.Options{SegmentSize: segmentSize})
}

func (e *env) openWith(opts engine.Options) (*engine.DB, error) {
	if e.db != nil {
		return e.db, nil
	}
	opts.Logger = stderrLogger{w: e.stderr, quiet: e.g.quiet}
	opts.Clock = engineClock
	opts.ReadOnly = opts.ReadOnly || e.g.readOnly
	db, err := engine.Open(e.g.dir, opts)
	if err != nil {
		return nil, err
	}
	e.db = db
	return db, nil
}

// engineClock is the clock the commands open a database and an outbox
// with (record times, checkpoint and snapshot times, an outbox's
// schedule); nil is their default, time.Now. The golden-output tests fix it, so that the records they write,
// and so their hashes, are the same on every run.
var engineClock func() time.Time

// closeDB closes the database. After a failed command it discards one the
// command created and wrote nothing to (engine.DB.Discard): bad input leaves
// no empty database behind.
func (e *env) closeDB(failed bool) error {
	if e.db == nil {
		return nil
	}
	db := e.db
	e.db = nil
	if failed {
		_, err := db.Discard()
		return err
	}
	return db.Close()
}

// stderrLogger prints the engine's recovery reports and background errors.
type stderrLogger struct {
	w     io.Writer
	quiet bool
}

func (l stderrLogger) Infof(format string, args ...any) {
	if !l.quiet {
		fmt.Fprintf(l.w, "anchordb: "+format+"\n", args...)
	}
}

func (l stderrLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(l.w, "anchordb: "+format+"\n", args...)
}

// progressOK reports whether progress may be drawn: stderr is a terminal and
// neither --quiet nor --no-progress was given.
func (e *env) progressOK() bool {
	if e.g.quiet || e.g.noProgress {
		return false
	}
	f, ok := e.stderr.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress draws one status line on stderr when progressOK; Done clears
// it. It is the demo's demo.Progress too.
type progress struct {
	w  io.Writer
	on bool
}

func (e *env) newProgress() *progress { return &progress{w: e.stderr, on: e.progressOK()} }

// Update replaces the line with a new one.
func (p *progress) Update(format string, args ...any) {
	if p.on {
		fmt.Fprintf(p.w, "\r\x1b[K"+format, args...)
	}
}

// Done clears the line.
func (p *progress) Done() {
	if p.on {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
