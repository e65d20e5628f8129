package merge

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the layering of STYLE.md: merge builds on segment,
// internal/errs and internal/jsonobj only — never engine, never its sibling package.
func TestImports(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{
		"github.com/anchordb/anchordb/segment":          true,
		"github.com/anchordb/anchordb/internal/errs":    true,
		"github.com/anchordb/anchordb/internal/jsonobj": true,
	}
	for _, imp := range p.Imports {
		if strings.HasPrefix(imp, "github.com/anchordb/anchordb/") && !allowed[imp] {
			t.Errorf("merge imports %s", imp)
		}
	}
}
