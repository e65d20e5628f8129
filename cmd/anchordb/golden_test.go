package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anchordb/anchordb/engine"
	"github.com/anchordb/anchordb/segment"
	"github.com/anchordb/anchordb/tool/demo"
	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestGoldenOutputs runs the scripts in testdata/output through run, in
// this process, and compares everything a command prints — stdout, stderr
// and the exit status — with what the script says, byte for byte. They pin
// the CLI's output in every mode (text, --json, --quiet), so a change to
// how it is printed shows as a diff here; `go test -run TestGoldenOutputs
// -rewrite` writes the new outputs into the scripts when a change is meant.
//
// The database clock is fixed (goldenTime), so records, and their hashes,
// are the same on every run. What still differs between runs is replaced
// before the comparison: the test's directory ($TMP), database ids
// ($DBID), checkpoint signatures ($SIG), and whatever a directive's mask
// names (durations, sizes of Pebble's files, the build).
//
// Directives:
//
//	run [mask=NAME…] [save=PATH]
//	                        the first input line is the command line ($DIR is
//	                        the script's database, $TMP its directory); the
//	                        lines after it are stdin; save writes what it
//	                        printed on stdout to $TMP/PATH
//	modes [mask=NAME…]      run the command line three times — as written,
//	                        with --json, with --quiet — and print each output
//	demo-report             print the demo's report given as JSON in each mode
//	file name=PATH          write the input (and a newline) to $TMP/PATH
//	flip name=GLOB offset=N invert the byte at N (from the end when N < 0) of
//	                        the one file under $TMP that GLOB matches; {ID} in
//	                        GLOB is anchor ID's directory (anchors/xx/…)
//	copy from=GLOB to=PATH  copy the one file GLOB matches to $TMP/PATH
//	remove name=GLOB        remove the files under $TMP that GLOB matches
func TestGoldenOutputs(t *testing.T) {
	defer func(c func() time.Time) { engineClock = c }(engineClock)
	engineClock = func() time.Time { return goldenTime }
	datadriven.Walk(t, filepath.Join("testdata", "output"), func(t *testing.T, path string) {
		g := &golden{tmp: t.TempDir()}
		g.dir = filepath.Join(g.tmp, "db")
		datadriven.RunTest(t, path, g.do)
	})
}

// goldenTime is the time of every record and checkpoint the scripts write.
var goldenTime = time.Date(2026, 1, 31, 12, 0, 0, 1, time.UTC)

type golden struct {
	tmp string // the script's directory
	dir string // its database: $TMP/db
}

func (g *golden) do(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "run":
		args, stdin := g.command(t, td)
		out, stdout := g.run(args, stdin)
		if td.HasArg("save") {
			var name string
			td.ScanArgs(t, "save", &name)
			g.write(t, name, stdout)
		}
		return g.scrub(t, td, out)
	case "modes":
		args, stdin := g.command(t, td)
		text, _ := g.run(args, stdin)
		json, _ := g.run(append(args, "--json"), stdin)
		quiet, _ := g.run(append(args, "--quiet"), stdin)
		var b strings.Builder
		b.WriteString("== text\n" + text + "== --json\n" + json)
		if quiet == text {
			b.WriteString("== --quiet: as text\n")
		} else {
			b.WriteString("== --quiet\n" + quiet)
		}
		return g.scrub(t, td, b.String())
	case "demo-report":
		// The demo's report in every mode: the demo itself writes with
		// the real clock and measures its speed, so its report is fixed
		// here instead.
		var r demo.Report
		dec := json.NewDecoder(strings.NewReader(td.Input))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%s: %v", td.Pos, err)
		}
		var b strings.Builder
		for _, mode := range []struct {
			name        string
			json, quiet bool
		}{{"text", false, false}, {"--json", true, false}, {"--quiet", false, true}} {
			var stdout bytes.Buffer
			e := &env{g: &globals{json: mode.json, quiet: mode.quiet}, out: newOutput(&stdout)}
			newPrinter(e).Demo(r)
			if err := e.out.flush(); err != nil {
				t.Fatal(err)
			}
			b.WriteString("== " + mode.name + "\n" + stdout.String())
		}
		return b.String()
	case "file":
		var name string
		td.ScanArgs(t, "name", &name)
		g.write(t, name, []byte(td.Input+"\n"))
		return ""
	case "flip":
		var name string
		var off int
		td.ScanArgs(t, "name", &name)
		td.ScanArgs(t, "offset", &off)
		files := g.glob(t, name)
		if len(files) != 1 {
			t.Fatalf("%s: %s matches %d files", td.Pos, name, len(files))
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		if off < 0 {
			off += len(b)
		}
		b[off] ^= 0xff
		if err := os.WriteFile(files[0], b, 0o644); err != nil {
			t.Fatal(err)
		}
		return ""
	case "copy":
		var from, to string
		td.ScanArgs(t, "from", &from)
		td.ScanArgs(t, "to", &to)
		files := g.glob(t, from)
		if len(files) != 1 {
			t.Fatalf("%s: %s matches %d files", td.Pos, from, len(files))
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		g.write(t, to, b)
		return ""
	case "remove":
		var name string
		td.ScanArgs(t, "name", &name)
		for _, f := range g.glob(t, name) {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		return ""
	}
	t.Fatalf("%s: unknown directive %q", td.Pos, td.Cmd)
	return ""
}

// write writes data to $TMP/name.
func (g *golden) write(t *testing.T, name string, data []byte) {
	t.Helper()
	p := filepath.Join(g.tmp, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// anchorRE matches {ID} in a file name of a directive: the directory of
// anchor ID's segments under the database root ("anchors/xx/…").
var anchorRE = regexp.MustCompile(`\{([^}]+)\}`)

func (g *golden) glob(t *testing.T, pattern string) []string {
	t.Helper()
	pattern = anchorRE.ReplaceAllStringFunc(pattern, func(m string) string {
		return segment.AnchorDir(vfs.Default, "", m[1:len(m)-1])
	})
	files, err := filepath.Glob(filepath.Join(g.tmp, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// command is a run's arguments, with $DIR and $TMP put in, and its stdin.
func (g *golden) command(t *testing.T, td *datadriven.TestData) ([]string, []byte) {
	line, rest, hasStdin := strings.Cut(td.Input, "\n")
	args, err := splitArgs(line)
	if err != nil {
		t.Fatalf("%s: %v", td.Pos, err)
	}
	r := strings.NewReplacer("$DIR", g.dir, "$TMP", g.tmp)
	for i := range args {
		args[i] = r.Replace(args[i])
	}
	var stdin []byte
	if hasStdin {
		stdin = []byte(r.Replace(rest) + "\n")
	}
	return args, stdin
}

// run runs one command line and returns what it printed — stdout as it
// is, each line of stderr after "stderr: ", and the exit status when it is
// not 0 — and stdout alone.
func (g *golden) run(args []string, stdin []byte) (string, []byte) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, bytes.NewReader(stdin), &stdout, &stderr)
	var b strings.Builder
	b.Write(stdout.Bytes())
	if stdout.Len() > 0 && !bytes.HasSuffix(stdout.Bytes(), []byte("\n")) {
		b.WriteString("\n(no newline at the end of stdout)\n")
	}
	if s := strings.TrimSuffix(stderr.String(), "\n"); s != "" {
		for _, l := range strings.Split(s, "\n") {
			b.WriteString("stderr: " + l + "\n")
		}
	}
	if code != exitOK {
		fmt.Fprintf(&b, "exit %d\n", code)
	}
	return b.String(), stdout.Bytes()
}

// masks replace what differs from run to run in the outputs of some
// commands; a directive names the ones its output needs (mask=NAME).
var masks = map[string][]struct {
	re  *regexp.Regexp
	out string
}{
	// Durations measured by the command.
	"seconds": {
		{regexp.MustCompile(`("seconds":)[0-9.e-]+`), "${1}$$SECONDS"},
		{regexp.MustCompile(`in [0-9]+\.[0-9]{3}s`), "in $${SECONDS}s"},
	},
	// The sizes of Pebble's files and the timings stats reports.
	"stats": {
		{regexp.MustCompile(`("index_bytes":)[0-9]+`), "${1}$$N"},
		{regexp.MustCompile(`(index bytes: +)[0-9]+ \([^)]*\)`), "${1}$$N"},
		{regexp.MustCompile(`("sync_latency_p(50|99)_ns":)[0-9]+`), "${1}$$N"},
		{regexp.MustCompile(`(?m)(fdatasync p50 )\S+(, p99 )\S+$`), "${1}$$D${2}$$D"},
	},
	// Every hash: an outbox's flush appends its rows in an order that
	// differs from run to run, and so do the hashes of the records from
	// the first flush on.
	"hashes": {
		{regexp.MustCompile(`blake3:[0-9a-f]{64}`), "blake3:$$HASH"},
	},
	// What the build says of itself.
	"build": {
		{regexp.MustCompile(`("version":)"[^"]*"`), `${1}"$$VERSION"`},
		{regexp.MustCompile(`("vcs_revision":)"[^"]*"`), `${1}"$$REV"`},
		{regexp.MustCompile(`("vcs_time":)"[^"]*"`), `${1}"$$TIME"`},
		{regexp.MustCompile(`,"vcs_modified":true`), ``},
		{regexp.MustCompile(`("go":)"[^"]*"`), `${1}"$$GO"`},
		{regexp.MustCompile(`(?m)^(anchordb \S+ ).*(, )go\S+$`), `${1}$$VERSION${2}$$GO`},
	},
}

// sigRE matches the signature of a signed note's signature line (whose
// key is fixed, but whose text, the database id among it, is not).
var sigRE = regexp.MustCompile(`(— \S+ )[A-Za-z0-9+/]{40,}={0,2}`)

// scrub replaces what differs from run to run: the directory, database
// ids, signatures and the masks td names.
func (g *golden) scrub(t *testing.T, td *datadriven.TestData, out string) string {
	for _, m := range td.CmdArgs {
		if m.Key != "mask" {
			continue
		}
		for _, name := range m.Vals {
			rules, ok := masks[name]
			if !ok {
				t.Fatalf("%s: unknown mask %q", td.Pos, name)
			}
			for _, r := range rules {
				out = r.re.ReplaceAllString(out, r.out)
			}
		}
	}
	dbs, _ := filepath.Glob(filepath.Join(g.tmp, "*", engine.IDFile))
	for _, f := range dbs {
		b, err := os.ReadFile(f)
		if id := strings.TrimSpace(string(b)); err == nil && len(id) == 32 {
			name := "$DBID"
			if d := filepath.Dir(f); d != g.dir {
				name = "$DBID(" + filepath.Base(d) + ")"
			}
			out = strings.ReplaceAll(out, id, name)
		}
	}
	out = sigRE.ReplaceAllString(out, "${1}$$SIG")
	if real, err := filepath.EvalSymlinks(g.tmp); err == nil && real != g.tmp {
		out = strings.ReplaceAll(out, real, "$TMP")
	}
	return strings.ReplaceAll(out, g.tmp, "$TMP")
}

// splitArgs splits a command line at blanks; single or double quotes keep
// what they enclose (blanks included) as it is.
func splitArgs(line string) ([]string, error) {
	var args []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				args = append(args, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c in %q", quote, line)
	}
	if in {
		args = append(args, cur.String())
	}
	return args, nil
}
