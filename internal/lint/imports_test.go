// Package lint holds checks over the whole module, as Pebble's internal/lint
// does. It has no code of its own.
package lint

import (
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/anchordb/anchordb/"

// layers says, for each package of the module, which of the module's
// packages it may import (CONTRACT §11, STYLE.md): cmd, bench and fuzz sit on
// engine, cmd and bench also on outbox (a client of engine's public API);
// engine on merge, snapshot and proof; those three on segment and never on
// one another; segment on internal/errs alone. engine/internal/... hold
// parts of the engine below it (schema: the index rows; gate: the close
// gate; admission: the in-flight bounds and the rate limit; scratch:
// throwaway stores; treestore: the anchors' trees in the index). A package
// missing here fails the test, so a new one has to take its place in the
// layering.
var layers = map[string][]string{
	"internal/errs":             nil,
	"internal/invariants":       nil,
	"internal/jsonobj":          {"internal/errs"},
	"internal/fsutil":           nil,
	"internal/humanize":         nil,
	"internal/journal":          {"internal/errs", "internal/fsutil"},
	"internal/lint":             nil,
	"internal/testutil":         {"internal/errs", "segment"},
	"segment":                   {"internal/errs"},
	"merge":                     {"segment", "internal/errs", "internal/jsonobj"},
	"snapshot":                  {"segment", "internal/errs", "internal/jsonobj", "internal/fsutil", "internal/testutil"},
	"proof":                     {"segment", "internal/errs", "internal/jsonobj", "internal/testutil"},
	"engine/internal/schema":    {"segment"},
	"engine/internal/gate":      nil,
	"engine/internal/admission": {"engine/internal/gate", "internal/errs", "internal/humanize", "internal/testutil"},
	"engine/internal/scratch":   {"internal/errs"},
	"engine/internal/treestore": {"engine/internal/schema", "proof", "segment", "internal/errs"},
	"engine": {"engine/internal/schema", "engine/internal/gate", "engine/internal/admission", "engine/internal/scratch",
		"engine/internal/treestore", "merge", "snapshot", "proof", "segment",
		"internal/errs", "internal/journal", "internal/invariants", "internal/fsutil", "internal/testutil"},
	"outbox":        {"engine", "segment", "snapshot", "proof", "internal/errs", "internal/jsonobj"},
	"bench/harness": {"engine", "merge", "snapshot", "proof", "segment", "internal/errs"},
	"bench": {"bench/harness", "engine", "merge", "snapshot", "proof", "segment", "outbox",
		"internal/errs", "internal/journal"},
	"tool/importer": {"engine", "segment", "internal/errs", "internal/jsonobj", "internal/humanize"},
	"tool/demo":     {"engine", "merge", "proof", "segment", "snapshot", "internal/errs", "internal/humanize"},
	"cmd/anchordb": {"bench/harness", "tool/importer", "tool/demo", "engine", "merge", "snapshot", "proof", "segment", "outbox",
		"internal/errs", "internal/humanize"},
	"fuzz": {"engine", "merge", "snapshot", "proof", "segment", "tool/importer",
		"internal/errs", "internal/journal", "internal/jsonobj", "internal/testutil"},
}

// testOnly are the packages that hold test helpers: any package's tests may
// import them (within its layer), no package's code may. Each still needs
// its place in layers.
var testOnly = map[string]bool{"internal/testutil": true}

// TestImports checks every package's imports, its tests' included, against
// layers: lower layers never import higher ones. A package of testOnly may
// appear only among a package's test imports.
func TestImports(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		// bench/peers is a module of its own (the real peers stay out of
		// the engine's dependency graph); testdata and dot directories hold
		// no packages of this module.
		if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || rel == "bench/peers") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(p, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		seen++
		allowed, known := layers[rel]
		if !known {
			t.Errorf("package %s has no place in the layering: add it to layers", rel)
			return nil
		}
		ok := map[string]bool{rel: true}
		for _, a := range allowed {
			ok[a] = true
		}
		bad := map[string]bool{}
		for _, imp := range slices.Concat(pkg.Imports, pkg.TestImports, pkg.XTestImports) {
			if dep, inModule := strings.CutPrefix(imp, module); inModule && !ok[dep] && !bad[dep] {
				bad[dep] = true
				t.Errorf("%s imports %s, which its layer may not", rel, dep)
			}
		}
		for _, imp := range pkg.Imports {
			if dep, inModule := strings.CutPrefix(imp, module); inModule && testOnly[dep] {
				t.Errorf("%s imports the test-only package %s outside its tests", rel, dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < len(layers) {
		t.Errorf("found %d packages, layers names %d: a package was removed or the walk missed it", seen, len(layers))
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root was not found at %s: %v", root, err)
	}
}

// TestOnlyTheBenchCommandImportsTheHarness keeps the benchmark harness the
// library of `anchordb bench` alone: the other commands carry no benchmark
// code, and what they share with the harness lives below both. layers lets
// cmd/anchordb import bench/harness; this narrows it to bench.go.
func TestOnlyTheBenchCommandImportsTheHarness(t *testing.T) {
	dir := filepath.Join("..", "..", "cmd", "anchordb")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		parsed, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			if imp.Path.Value == `"`+module+`bench/harness"` && filepath.Base(f) != "bench.go" {
				t.Errorf("%s imports bench/harness: only bench.go, the bench command, may", f)
			}
		}
	}
}
