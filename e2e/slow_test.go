package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// slowCoveredBy maps each [slow] scenario (skipped without E2E_SLOW=1) to
// the root-package test, and subtest, that covers it under fake time on
// every run.
var slowCoveredBy = map[string]string{
	"TestS15RetryAfterCap":     "TestRetryAfterCapped/600",
	"TestS22HTTPDateFarFuture": "TestRetryAfterCapped/date+3600",
	"TestS24HugeInteger":       "TestRetryAfterCapped/99999999999999999999",
}

// TestSlowScenariosAreCovered checks that every test named in a [slow]
// skip exists in the root package and that its body names the subtest, so
// a rename cannot leave a skip pointing at nothing.
func TestSlowScenariosAreCovered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("root package tests not found: %v", err)
	}
	bodies := map[string][]string{} // test function → its string literals
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			var lits []string
			ast.Inspect(fn, func(n ast.Node) bool {
				if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
					if s, err := strconv.Unquote(l.Value); err == nil {
						lits = append(lits, s)
					}
				}
				return true
			})
			bodies[fn.Name.Name] = lits
		}
	}
	for scenario, cover := range slowCoveredBy {
		name, sub, _ := strings.Cut(cover, "/")
		lits, ok := bodies[name]
		if !ok {
			t.Errorf("%s: the root package has no %s", scenario, name)
			continue
		}
		if sub != "" && !contains(lits, sub) {
			t.Errorf("%s: %s has no subtest %q", scenario, name, sub)
		}
	}
}
