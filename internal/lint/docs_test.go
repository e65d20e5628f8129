package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// documented are the packages whose exported API users read with go doc:
// every exported identifier there needs a doc comment (go vet does not ask).
var documented = []string{"engine", "engine/internal/schema", "engine/internal/gate", "engine/internal/admission", "engine/internal/scratch", "engine/internal/treestore", "segment", "snapshot", "merge", "proof", "outbox", "tool/importer", "tool/demo"}

// TestExportedIdentifiersHaveDocs fails for an exported function, method (of
// an exported type), type, constant or variable without a doc comment in
// the packages above. A constant or variable is covered by its group's
// comment or a trailing line comment.
func TestExportedIdentifiersHaveDocs(t *testing.T) {
	for _, pkg := range documented {
		dir := filepath.Join("..", "..", pkg)
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for _, f := range p.Files {
				for _, d := range f.Decls {
					switch d := d.(type) {
					case *ast.FuncDecl:
						if d.Name.IsExported() && d.Doc == nil && exportedRecv(d) {
							t.Errorf("%s: func %s has no doc comment", fset.Position(d.Pos()), d.Name.Name)
						}
					case *ast.GenDecl:
						for _, sp := range d.Specs {
							switch sp := sp.(type) {
							case *ast.TypeSpec:
								if sp.Name.IsExported() && sp.Doc == nil && d.Doc == nil {
									t.Errorf("%s: type %s has no doc comment", fset.Position(sp.Pos()), sp.Name.Name)
								}
							case *ast.ValueSpec:
								for _, n := range sp.Names {
									if n.IsExported() && sp.Doc == nil && d.Doc == nil && sp.Comment == nil {
										t.Errorf("%s: %s has no doc comment", fset.Position(n.Pos()), n.Name)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// exportedRecv reports whether a function is a plain function or a method
// of an exported type: methods of unexported types do not show in go doc.
func exportedRecv(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return true
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, ok := t.(*ast.Ident)
	return !ok || id.IsExported()
}
