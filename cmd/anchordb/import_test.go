package main

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImportNativeLines(t *testing.T) {
	dir := t.TempDir()
	in := writeLines(t,
		`{"anchor":"imp","type":"put","key":"a","value":"1"}`,
		`{"anchor":"imp","key":"b","value":{"b64":"AAE="},"idempotency_key":"op-b"}`,
		``,
		`   `,
		`{"anchor":"imp","key":{"b64":"/w=="},"value":"binary key","counter":40,"time":"2026-01-31T12:00:00.000000001Z"}`,
		`{"anchor":"imp","type":"delete","key":"a","idempotency_key":{"b64":"aWQtMQ=="}}`,
		`{"anchor":"imp2","type":"METER","value":"e","key":null,"counter":null}`,
	)
	r := mustRun(t, "--dir", dir, "--json", "import", in)
	m := obj(t, r.stdout)
	if num(t, m, "imported") != 5 || num(t, m, "duplicates") != 0 || num(t, m, "lines") != 5 {
		t.Fatalf("summary %v", m)
	}
	l := lines(t, mustRun(t, "--dir", dir, "--json", "log", "imp").stdout)
	if len(l) != 4 {
		t.Fatalf("log imp: %v", l)
	}
	if l[0]["type"] != "put" || l[0]["key"] != "a" || l[0]["value"] != "1" {
		t.Fatalf("line 1: %v", l[0])
	}
	// AAE= is "\x00\x01": valid UTF-8, so it prints as a string.
	if l[1]["value"] != "\x00\x01" || l[1]["idempotency_key"] != "op-b" {
		t.Fatalf("line 2: %v", l[1])
	}
	if k, _ := l[2]["key"].(map[string]any); k["b64"] != "/w==" || num(t, l[2], "counter") != 40 || l[2]["time"] != "2026-01-31T12:00:00.000000001Z" {
		t.Fatalf("line 5: %v", l[2])
	}
	if l[3]["type"] != "delete" || l[3]["value"] != nil || l[3]["idempotency_key"] != "id-1" || num(t, l[3], "counter") != 41 {
		t.Fatalf("line 6: %v", l[3])
	}
	if e := obj(t, mustRun(t, "--dir", dir, "--json", "log", "imp2").stdout); e["type"] != "METER" || e["key"] != nil {
		t.Fatalf("imp2: %v", e)
	}

	// Only the lines with idempotency keys can be retried: import just those again.
	again := writeLines(t,
		`{"anchor":"imp","key":"b","value":{"b64":"AAE="},"idempotency_key":"op-b"}`,
		`{"anchor":"imp","type":"delete","key":"a","idempotency_key":"id-1"}`,
	)
	r = mustRun(t, "--dir", dir, "--json", "import", again)
	if m := obj(t, r.stdout); num(t, m, "imported") != 0 || num(t, m, "duplicates") != 2 {
		t.Fatalf("re-import: %v", m)
	}
	// Human summary, and stdin.
	r = cli(t, []byte(`{"anchor":"imp3","key":"x","value":"y"}`), []string{"--dir", dir, "import", "-"})
	wantExit(t, r, 0)
	if !strings.Contains(r.stdout, "imported 1 record") {
		t.Fatalf("human summary: %v", r)
	}
}

func TestImportEventLines(t *testing.T) {
	dir := t.TempDir()
	in := writeLines(t,
		`{"anchor_id":"anchor_device_001","local_counter":5,"event_type":"TELEMETRY_UPDATE","timestamp":"2026-01-31T12:00:00.000Z","payload":{"cpu": 75.5, "tags":["a", "b"]},"signature":"ignored"}`,
		`{"anchor_id":"anchor_device_001","local_counter":9,"event_type":"NOTE","payload":"plain text"}`,
		`{"anchor_id":"anchor_device_001","local_counter":12,"event_type":"COUNT","payload":42,"key":"k","idempotency_key":"ev-12"}`,
		`{"anchor_id":"anchor_device_002","event_type":"BOOT"}`,
	)
	r := mustRun(t, "--dir", dir, "--json", "import", in)
	if m := obj(t, r.stdout); num(t, m, "imported") != 4 {
		t.Fatalf("summary %v", m)
	}
	l := lines(t, mustRun(t, "--dir", dir, "--json", "log", "anchor_device_001").stdout)
	if len(l) != 3 {
		t.Fatalf("log: %v", l)
	}
	want := []struct {
		counter   int64
		typ, val  string
		time, key any
	}{
		{5, "TELEMETRY_UPDATE", `{"cpu":75.5,"tags":["a","b"]}`, "2026-01-31T12:00:00.000000000Z", nil},
		{9, "NOTE", "plain text", nil, nil},
		{12, "COUNT", "42", nil, "k"},
	}
	for i, w := range want {
		got := l[i]
		if num(t, got, "counter") != w.counter || got["type"] != w.typ || got["value"] != w.val || got["key"] != w.key {
			t.Errorf("event %d: %v, want %+v", i, got, w)
		}
		if w.time != nil && got["time"] != w.time {
			t.Errorf("event %d time %v, want %v", i, got["time"], w.time)
		}
	}
	if l[2]["idempotency_key"] != "ev-12" {
		t.Errorf("idempotency key: %v", l[2])
	}
	// Without local_counter the clock assigns one above everything seen.
	b := obj(t, mustRun(t, "--dir", dir, "--json", "log", "anchor_device_002").stdout)
	if num(t, b, "counter") != 13 {
		t.Errorf("assigned counter %v, want 13", b["counter"])
	}
	// A local write afterwards sorts after the imported events.
	p := obj(t, mustRun(t, "--dir", dir, "--json", "put", "anchor_device_001", "k2", "v").stdout)
	if num(t, p, "counter") != 14 {
		t.Errorf("local counter after import: %v", p)
	}
}

func TestImportErrors(t *testing.T) {
	good := `{"anchor":"e","key":"k","value":"v"}`
	cases := []struct {
		name     string
		lines    []string
		code     string
		exit     int
		line     int
		imported int
	}{
		{"malformed json", []string{good, good, `{"anchor":"e",`}, "INPUT_001", 2, 3, 0},
		{"not an object", []string{`[1,2]`}, "INPUT_001", 2, 1, 0},
		{"null", []string{good, `null`}, "INPUT_001", 2, 2, 0},
		{"trailing data", []string{good + ` {}`}, "INPUT_001", 2, 1, 0},
		{"unknown field", []string{good, `{"anchor":"e","key":"k","vaule":"v"}`}, "INPUT_001", 2, 2, 0},
		{"missing anchor", []string{`{"key":"k","value":"v"}`}, "INPUT_001", 2, 1, 0},
		{"empty anchor", []string{`{"anchor":"","key":"k"}`}, "INPUT_001", 2, 1, 0},
		{"anchor too long", []string{`{"anchor":"` + strings.Repeat("x", 256) + `","key":"k"}`}, "INPUT_001", 2, 1, 0},
		{"anchor not a string", []string{`{"anchor":7,"key":"k"}`}, "INPUT_001", 2, 1, 0},
		{"put without key", []string{`{"anchor":"e","value":"v"}`}, "INPUT_001", 2, 1, 0},
		{"bad base64", []string{`{"anchor":"e","key":"k","value":{"b64":"!!"}}`}, "INPUT_001", 2, 1, 0},
		{"b64 with extra field", []string{`{"anchor":"e","key":"k","value":{"b64":"AA==","x":1}}`}, "INPUT_001", 2, 1, 0},
		{"b64 null", []string{`{"anchor":"e","key":"k","value":{"b64":null}}`}, "INPUT_001", 2, 1, 0},
		{"b64 a number", []string{`{"anchor":"e","key":"k","value":{"b64":1}}`}, "INPUT_001", 2, 1, 0},
		{"value a number", []string{`{"anchor":"e","key":"k","value":1}`}, "INPUT_001", 2, 1, 0},
		{"counter zero", []string{`{"anchor":"e","key":"k","counter":0}`}, "INPUT_001", 2, 1, 0},
		{"counter fraction", []string{`{"anchor":"e","key":"k","counter":1.5}`}, "INPUT_001", 2, 1, 0},
		{"counter negative", []string{`{"anchor":"e","key":"k","counter":-3}`}, "INPUT_001", 2, 1, 0},
		{"counter too big", []string{`{"anchor":"e","key":"k","counter":9223372036854775808}`}, "INPUT_001", 2, 1, 0},
		{"counter above the caller limit", []string{`{"anchor":"e","key":"k","counter":4611686018427387904}`}, "INPUT_001", 2, 1, 0},
		{"local_counter above the caller limit", []string{`{"anchor_id":"e","local_counter":4611686018427387904,"event_type":"X"}`}, "INPUT_001", 2, 1, 0},
		{"bad time", []string{`{"anchor":"e","key":"k","time":"yesterday"}`}, "INPUT_001", 2, 1, 0},
		{"delete with value", []string{`{"anchor":"e","type":"delete","key":"k","value":"v"}`}, "INPUT_001", 2, 1, 0},
		{"mixed forms", []string{`{"anchor_id":"e","anchor":"e","event_type":"X"}`}, "INPUT_001", 2, 1, 0},
		{"event without type", []string{`{"anchor_id":"e","payload":1}`}, "INPUT_001", 2, 1, 0},
		{"event bad timestamp", []string{`{"anchor_id":"e","event_type":"X","timestamp":"12:00"}`}, "INPUT_001", 2, 1, 0},
		{"empty type", []string{`{"anchor":"e","type":"","key":"k","value":"v"}`}, "INPUT_001", 2, 1, 0},
		{"empty event type", []string{`{"anchor_id":"e","event_type":"","payload":1}`}, "INPUT_001", 2, 1, 0},
		{"empty idempotency key", []string{`{"anchor":"e","key":"k","value":"v","idempotency_key":""}`}, "INPUT_001", 2, 1, 0},
		{"empty b64 idempotency key", []string{`{"anchor":"e","key":"k","value":"v","idempotency_key":{"b64":""}}`}, "INPUT_001", 2, 1, 0},
		{"duplicate fields", []string{good, `{"anchor":"first","key":"k","value":"v1","value":"v2","anchor":"second"}`}, "INPUT_001", 2, 2, 0},
		{"duplicate field by escape", []string{`{"anchor":"e","key":"k","k\u0065y":"k2"}`}, "INPUT_001", 2, 1, 0},
		{"duplicate event field", []string{`{"anchor_id":"e","event_type":"X","payload":1,"payload":2}`}, "INPUT_001", 2, 1, 0},
		{"duplicate b64", []string{`{"anchor":"e","key":"k","value":{"b64":"AA==","b64":"AQ=="}}`}, "INPUT_001", 2, 1, 0},
		{"idempotency key too long", []string{`{"anchor":"e","key":"k","idempotency_key":"` + strings.Repeat("i", 257) + `"}`}, "INPUT_001", 2, 1, 0},
		{"counter conflict", []string{`{"anchor":"e","key":"k","counter":10}`, good, `{"anchor":"e","key":"k","counter":10}`, good}, "STATE_002", 1, 3, 2},
		{"event counter conflict", []string{`{"anchor_id":"e","local_counter":5,"event_type":"X"}`, `{"anchor_id":"e","local_counter":5,"event_type":"X"}`}, "STATE_002", 1, 2, 1},
		{"idempotency conflict", []string{`{"anchor":"e","key":"k","value":"1","idempotency_key":"i"}`, `{"anchor":"e","key":"k","value":"2","idempotency_key":"i"}`}, "STATE_002", 1, 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := runCLI(t, "--dir", dir, "--json", "import", writeLines(t, c.lines...))
			wantExit(t, r, c.exit)
			e := errObj(t, r, c.code)
			if num(t, e, "line") != int64(c.line) || num(t, e, "imported") != int64(c.imported) {
				t.Fatalf("line/imported: %v", e)
			}
			if msg := str(t, e, "message"); !strings.HasPrefix(msg, "line "+strconv.Itoa(c.line)+": ") {
				t.Fatalf("message does not name the line: %q", msg)
			}
			if strings.HasPrefix(c.name, "duplicate") && !strings.Contains(str(t, e, "message"), "appears twice") {
				t.Fatalf("message does not say a field appears twice: %v", e)
			}
			if c.code == "INPUT_001" {
				// A malformed line is found before anything is appended:
				// the database was not even created.
				if ents, _ := os.ReadDir(dir); len(ents) != 0 {
					t.Fatalf("a refused import left %v in the directory", ents)
				}
			} else {
				// A refusal found while appending: exactly the lines
				// before the failing one were imported.
				l := lines(t, mustRun(t, "--dir", dir, "--json", "log", "e").stdout)
				if len(l) != c.imported {
					t.Fatalf("%d records in the log, want %d", len(l), c.imported)
				}
			}
			// Without --json: one line on stderr naming the line.
			r = runCLI(t, "--dir", t.TempDir(), "import", writeLines(t, c.lines...))
			wantExit(t, r, c.exit)
			if !strings.Contains(r.stderr, c.code) || !strings.Contains(r.stderr, fmt.Sprintf("line %d: ", c.line)) {
				t.Fatalf("human error: %v", r)
			}
		})
	}

	r := runCLI(t, "--dir", t.TempDir(), "--json", "import", filepath.Join(t.TempDir(), "absent.jsonl"))
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
}

// TestImportConflictInsideBatch puts the failing line deep inside a batch: the
// lines before it in the same batch are imported, and the error names it.
func TestImportConflictInsideBatch(t *testing.T) {
	dir := t.TempDir()
	var in []string
	for i := 1; i <= 2500; i++ {
		in = append(in, fmt.Sprintf(`{"anchor":"q","key":"k%d","value":"%d"}`, i, i))
	}
	in = append(in, `{"anchor":"q","key":"x","counter":1}`, `{"anchor":"q","key":"y"}`)
	r := runCLI(t, "--dir", dir, "--json", "import", "--batch", "1000", "--no-sync", writeLines(t, in...))
	wantExit(t, r, 1)
	e := errObj(t, r, "STATE_002")
	if num(t, e, "line") != 2501 || num(t, e, "imported") != 2500 {
		t.Fatalf("error %v", e)
	}
	st := obj(t, mustRun(t, "--dir", dir, "--json", "stats").stdout)
	if num(t, st, "records") != 2500 {
		t.Fatalf("stats after a failed import: %v", st)
	}
}

// TestImportUTF8: a JSON string is never silently changed. Invalid UTF-8
// bytes and lone or unpaired surrogate escapes (which encoding/json turns
// into U+FFFD) are refused with INPUT_001 naming the line and the field; a
// genuine U+FFFD, literal or escaped, and a surrogate pair import as they are.
func TestImportUTF8(t *testing.T) {
	good := `{"anchor":"e","key":"k","value":"v"}`
	for _, c := range []struct{ name, line, field string }{
		{"raw anchor", "{\"anchor\":\"u\xff\",\"key\":\"k\",\"value\":\"v\"}", "anchor"},
		{"raw key", "{\"anchor\":\"u\",\"key\":\"k\xff\",\"value\":\"v\"}", "key"},
		{"raw value", "{\"anchor\":\"u\",\"key\":\"k\",\"value\":\"v\xfe\"}", "value"},
		{"raw type", "{\"anchor\":\"u\",\"type\":\"T\xc3\",\"value\":\"v\"}", "type"},
		{"raw idempotency key", "{\"anchor\":\"u\",\"key\":\"k\",\"idempotency_key\":\"i\xff\"}", "idempotency_key"},
		{"raw payload", "{\"anchor_id\":\"u\",\"event_type\":\"T\",\"payload\":\"p\xff\"}", "payload"},
		{"raw event type", "{\"anchor_id\":\"u\",\"event_type\":\"T\xff\"}", "event_type"},
		{"lone high surrogate anchor", `{"anchor":"u\ud800","key":"k"}`, "anchor"},
		{"lone low surrogate key", `{"anchor":"u","key":"\udc00"}`, "key"},
		{"unpaired high surrogate value", `{"anchor":"u","key":"k","value":"\ud800x"}`, "value"},
		{"reversed pair type", `{"anchor":"u","type":"\udc00\ud800","value":"v"}`, "type"},
		{"surrogate beside a real U+FFFD", `{"anchor":"u","key":"k","value":"\ufffd\ud800"}`, "value"},
		{"surrogate after an escaped backslash", `{"anchor":"u","key":"k","value":"\\ufffd\ud800"}`, "value"},
		{"surrogate idempotency key", `{"anchor":"u","key":"k","idempotency_key":"\ud800"}`, "idempotency_key"},
		{"surrogate payload", `{"anchor_id":"u","event_type":"T","payload":"\udfff"}`, "payload"},
		{"surrogate time", `{"anchor":"u","key":"k","time":"2026-01-31T12:00:00Z\ud800"}`, "time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := runCLI(t, "--dir", dir, "--json", "import", writeLines(t, good, c.line))
			wantExit(t, r, 2)
			e := errObj(t, r, "INPUT_001")
			if msg := str(t, e, "message"); num(t, e, "line") != 2 || !strings.HasPrefix(msg, "line 2: ") || !strings.Contains(msg, strconv.Quote(c.field)) {
				t.Fatalf("message does not name line 2 and field %q: %v", c.field, e)
			}
		})
	}

	dir := t.TempDir()
	in := writeLines(t,
		`{"anchor":"r\ufffd","key":"k1","value":"a\uFFFDb","idempotency_key":"i\ufffd"}`,
		"{\"anchor\":\"r\uFFFD\",\"key\":\"k2\",\"value\":\"lit\uFFFD\",\"type\":\"T\uFFFD\"}",
		`{"anchor":"r\ufffd","key":"k3","value":"\ud83d\ude00 \\ud800"}`,
	)
	r := mustRun(t, "--dir", dir, "--json", "import", in)
	if m := obj(t, r.stdout); num(t, m, "imported") != 3 {
		t.Fatalf("summary %v", m)
	}
	l := lines(t, mustRun(t, "--dir", dir, "--json", "log", "r\uFFFD").stdout)
	if len(l) != 3 || l[0]["value"] != "a\uFFFDb" || l[0]["idempotency_key"] != "i\uFFFD" ||
		l[1]["value"] != "lit\uFFFD" || l[1]["type"] != "T\uFFFD" || l[2]["value"] != "\U0001F600 \\ud800" {
		t.Fatalf("log: %v", l)
	}
}

// dirState is every file under dir with its contents' length and hash, to
// show a command changed nothing.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	st := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st[rel] = fmt.Sprintf("%d %x", len(b), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestImportAllOrNothing: a malformed or over-limit line anywhere in the
// input, from a file or from stdin, is found before anything is appended,
// so the database is unchanged (CONTRACT §9: never a partial write).
func TestImportAllOrNothing(t *testing.T) {
	var in []string
	for i := 1; i <= 25; i++ {
		in = append(in, fmt.Sprintf(`{"anchor":"w","key":"k%d","value":"%d"}`, i, i))
	}
	over := `{"anchor":"w","key":"big","value":"` + strings.Repeat("x", 16<<20+1) + `"}`
	for _, c := range []struct {
		name string
		bad  string
		at   int // the bad line's index in the input (its line number - 1)
	}{
		{"malformed last line", `{"anchor":"w",`, 25},
		{"malformed middle line", `garbage`, 12},
		{"over-limit value", over, 20},
		{"unknown field", `{"anchor":"w","key":"k","vaule":"v"}`, 24},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			mustRun(t, "--dir", dir, "put", "w", "seed", "1")
			lines := append(append(append([]string(nil), in[:c.at]...), c.bad), in[c.at:]...)
			file := writeLines(t, lines...)
			// The segments hold the records (the index changes on any open).
			segs := filepath.Join(dir, "anchors")
			before := dirState(t, segs)
			logBefore := mustRun(t, "--dir", dir, "--json", "log", "w").stdout

			r := runCLI(t, "--dir", dir, "--json", "import", "--batch", "2", file)
			wantExit(t, r, 2)
			e := errObj(t, r, "INPUT_001")
			if num(t, e, "line") != int64(c.at+1) || num(t, e, "imported") != 0 {
				t.Fatalf("error %v, want line %d and nothing imported", e, c.at+1)
			}
			if got := mustRun(t, "--dir", dir, "--json", "log", "w").stdout; got != logBefore {
				t.Fatalf("the log changed:\n%s", got)
			}

			// The same from stdin: spooled, checked, nothing appended, and
			// the spool file is gone.
			tmp := t.TempDir()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			r = cli(t, data, []string{"--dir", dir, "--json", "import", "--batch", "2", "-"}, "TMPDIR="+tmp)
			wantExit(t, r, 2)
			if e := errObj(t, r, "INPUT_001"); num(t, e, "line") != int64(c.at+1) {
				t.Fatalf("stdin: %v", e)
			}
			if got := mustRun(t, "--dir", dir, "--json", "log", "w").stdout; got != logBefore {
				t.Fatalf("the log changed:\n%s", got)
			}
			if got := dirState(t, segs); !maps.Equal(got, before) {
				t.Fatalf("a refused import changed the database:\nbefore %v\nafter  %v", before, got)
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
				t.Fatalf("the spool file was left behind: %v", ents)
			}
		})
	}

	// A good input from stdin still imports, and leaves no spool behind.
	dir, tmp := t.TempDir(), t.TempDir()
	r := cli(t, []byte(strings.Join(in, "\n")), []string{"--dir", dir, "--json", "import", "--batch", "7", "-"}, "TMPDIR="+tmp)
	wantExit(t, r, 0)
	if m := obj(t, r.stdout); num(t, m, "imported") != 25 || num(t, m, "lines") != 25 {
		t.Fatalf("summary %v", m)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("the spool file was left behind: %v", ents)
	}
}

// TestImportADirectory: a directory given as FILE is bad input (INPUT_001),
// not an I/O failure of the system (IO_001).
func TestImportADirectory(t *testing.T) {
	tmp := t.TempDir()
	r := runCLI(t, "--dir", filepath.Join(tmp, "db"), "--json", "import", tmp)
	wantExit(t, r, 2)
	errObj(t, r, "INPUT_001")
}
