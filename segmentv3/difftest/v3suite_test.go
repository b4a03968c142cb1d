package difftest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// v3's own test suites, run against the compatibility package.
//
// For each v3 module (v3.1.0 from gopkg.in, v3.3.0 from
// github.com/segmentio/analytics-go/v3) TestV3Suites takes the module's
// *_test.go files and fixtures/ from the module cache (go mod download),
// puts them beside a temporary copy of the compatibility package's source,
// and runs them with go test. Nothing of v3 is committed: the files are read
// from the module cache on every run.
//
// v3suite-exclusions.txt names every test that is not expected to pass, with
// a mode and a reason:
//
//   - internal: the test uses v3's unexported internals (its executor, JSON
//     reflection helpers, message queue), which have no counterpart here; it
//     is removed from its file before compiling.
//   - fail: the test compiles and runs, and must fail (a documented
//     difference). It runs on its own, so a test that starts passing is
//     reported and must leave the list.
//   - skip: the test compiles but is not run, because under the documented
//     difference it would crash the test binary (a nil client)
//
// Each reason is the id of a row of the "v3's own test suites" table in
// docs/migrating-from-segment-v3.md; the test checks that every id is
// there, and that the counts table there matches what it measured. Every
// test that is not on the list must pass.

const exclusionsFile = "v3suite-exclusions.txt"

// exclusion is one line of the exclusion list.
type exclusion struct {
	version, test, mode, reason string
}

// readExclusions parses v3suite-exclusions.txt: "version test mode reason"
// per line, version "*" for both suites, # comments.
func readExclusions(t *testing.T) []exclusion {
	t.Helper()
	f, err := os.Open(exclusionsFile)
	require.NoError(t, err)
	defer f.Close()
	var out []exclusion
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		require.Len(t, fs, 4, "%s:%d: want version, test, mode, reason", exclusionsFile, n)
		e := exclusion{version: fs[0], test: fs[1], mode: fs[2], reason: fs[3]}
		require.Contains(t, []string{"internal", "fail", "skip"}, e.mode, "%s:%d", exclusionsFile, n)
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}

// suiteCounts is what one suite run measured.
type suiteCounts struct {
	total, compiled, passed int
	excluded                map[string]int // by reason, internal ones included
}

// guideRows returns the reason ids of the guide's "v3's own test suites"
// table (rows "| `id` | …") and its counts rows ("| v3.x.y | total |
// compiled | passed | …").
func guideRows(t *testing.T) (reasons map[string]bool, counts map[string]string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/migrating-from-segment-v3.md")
	require.NoError(t, err)
	text := string(doc)
	i := strings.Index(text, "### v3's own test suites")
	require.GreaterOrEqual(t, i, 0, "the guide has a section \"v3's own test suites\"")
	text = text[i:]
	if j := strings.Index(text[4:], "\n#"); j >= 0 {
		text = text[:j+4]
	}
	reasons, counts = map[string]bool{}, map[string]string{}
	reasonRow := regexp.MustCompile("^\\| `([a-z0-9-]+)` \\|")
	countRow := regexp.MustCompile(`^\| (v3\.\d+\.\d+) \|(.*)\|$`)
	for _, line := range strings.Split(text, "\n") {
		if m := reasonRow.FindStringSubmatch(line); m != nil {
			reasons[m[1]] = true
		}
		if m := countRow.FindStringSubmatch(line); m != nil {
			counts[m[1]] = strings.Join(strings.Fields(m[2]), " ")
		}
	}
	return reasons, counts
}

// TestV3Suites runs v3.1.0's and v3.3.0's own tests against the
// compatibility package.
func TestV3Suites(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs v3's suites: not in -short")
	}
	all := readExclusions(t)
	reasons, counts := guideRows(t)
	for _, e := range all {
		assert.True(t, reasons[e.reason], "%s: reason %q is not a row of the guide's table", e.test, e.reason)
	}
	for _, suite := range []struct{ path, version string }{{v3Path, "v3.1.0"}, {v33Path, "v3.3.0"}} {
		t.Run(suite.version, func(t *testing.T) {
			var list []exclusion
			for _, e := range all {
				if e.version == "*" || e.version == suite.version {
					list = append(list, e)
				}
			}
			got := runSuite(t, moduleDir(t, suite.path), list)
			var byReason []string
			for r, n := range got.excluded {
				byReason = append(byReason, fmt.Sprintf("%s %d", r, n))
			}
			sort.Strings(byReason)
			line := fmt.Sprintf("%d | %d | %d | %s", got.total, got.compiled, got.passed, strings.Join(byReason, ", "))
			t.Logf("v3 %s: total | compiled | passed | excluded by reason: %s", suite.version, line)
			assert.Equal(t, strings.Join(strings.Fields(line), " "), counts[suite.version],
				"the guide's counts row for %s", suite.version)
		})
	}
}

// runSuite copies the compatibility package and the suite in src into a
// temporary module, compiles them without the internal tests, runs every
// test but the excluded ones (which must all pass), then each "fail" test
// on its own (each must fail).
func runSuite(t *testing.T, src string, list []exclusion) suiteCounts {
	t.Helper()
	internal, failing, skipped := map[string]string{}, map[string]string{}, map[string]string{}
	for _, e := range list {
		switch e.mode {
		case "internal":
			internal[e.test] = e.reason
		case "fail":
			failing[e.test] = e.reason
		case "skip":
			skipped[e.test] = e.reason
		}
	}

	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	// A path inside the SDK's, so the copy may import its internal packages.
	goMod := "module github.com/relaykit/analytics-go/v3suite\n\ngo 1.25\n\nrequire github.com/relaykit/analytics-go v0.0.0\n\n" +
		"replace github.com/relaykit/analytics-go => " + repo + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	copyFile(t, filepath.Join(repo, "go.sum"), filepath.Join(dir, "go.sum"))

	pkg, err := os.ReadDir("..")
	require.NoError(t, err)
	for _, e := range pkg {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			copyFile(t, filepath.Join("..", n), filepath.Join(dir, n))
		}
	}
	fixtures, err := os.ReadDir(filepath.Join(src, "fixtures"))
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "fixtures"), 0o755))
	for _, e := range fixtures {
		copyFile(t, filepath.Join(src, "fixtures", e.Name()), filepath.Join(dir, "fixtures", e.Name()))
	}

	counts := suiteCounts{excluded: map[string]int{}}
	tests := map[string]bool{} // every test and example that compiles
	removed := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(src, "*_test.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		code, names, gone := stripTests(t, f, internal)
		counts.total += len(names) + len(gone)
		for _, n := range names {
			tests[n] = true
		}
		for _, n := range gone {
			removed[n] = true
			counts.excluded[internal[n]]++
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), code, 0o644))
	}
	for n := range internal {
		assert.True(t, removed[n], "%s is listed as internal but no such test was found", n)
	}
	counts.compiled = len(tests)

	var notRun []string
	for n, r := range failing {
		require.True(t, tests[n], "%s is listed as failing but does not compile or exist", n)
		notRun = append(notRun, n)
		counts.excluded[r]++
	}
	for n, r := range skipped {
		require.True(t, tests[n], "%s is listed as skipped but does not compile or exist", n)
		notRun = append(notRun, n)
		counts.excluded[r]++
	}

	// Everything else passes.
	bin := buildSuite(t, dir)
	results := goTest(t, dir, bin, "-test.skip="+anchored(notRun))
	for n := range tests {
		if failing[n] != "" || skipped[n] != "" {
			continue
		}
		if assert.Equal(t, "pass", results[n], "v3's %s against the compatibility package", n) {
			counts.passed++
		}
	}
	// The expected failures fail, each on its own.
	var fails []string
	for n := range failing {
		fails = append(fails, n)
	}
	sort.Strings(fails)
	for _, n := range fails {
		res := goTest(t, dir, bin, "-test.run="+anchored([]string{n}))
		assert.Equal(t, "fail", res[n], "%s is listed as failing (%s); remove it from the list if it passes", n, failing[n])
	}
	return counts
}

// anchored is a -run/-skip pattern matching exactly the top-level names.
func anchored(names []string) string {
	if len(names) == 0 {
		return "^$"
	}
	sort.Strings(names)
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(q, "|") + ")$"
}

// buildSuite compiles the test binary of the package in dir (once; every
// run below reuses it). A build failure fails t.
func buildSuite(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "v3suite.test")
	cmd := exec.Command(goTool(t), "test", "-c", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "v3's tests must compile beside the compatibility package:\n%s", out)
	return bin
}

// goTest runs the test binary bin in dir (where fixtures/ is) with args,
// through go tool test2json, and returns the outcome of each top-level
// test ("pass", "fail", "skip").
func goTest(t *testing.T, dir, bin string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(goTool(t), append([]string{"tool", "test2json", "-t", bin,
		"-test.v=test2json", "-test.count=1", "-test.timeout=120s"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // failing tests exit non-zero
	res := map[string]string{}
	var output strings.Builder
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var ev struct{ Action, Test, Output string }
		if err := dec.Decode(&ev); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("test2json: %v\n%s%s", err, out, stderr.String())
		}
		output.WriteString(ev.Output)
		if ev.Test == "" || strings.Contains(ev.Test, "/") {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			res[ev.Test] = ev.Action
		}
	}
	if len(res) == 0 {
		t.Fatalf("v3's suite %s ran nothing:\n%s%s", strings.Join(args, " "), output.String(), stderr.String())
	}
	if os.Getenv("V3SUITE_VERBOSE") != "" {
		t.Logf("v3's suite %s:\n%s", strings.Join(args, " "), output.String())
	}
	return res
}

// stripTests parses a v3 test file, removes the top-level functions named
// in drop (and the imports only they used), and returns the source, the
// tests and examples left, and the ones removed.
func stripTests(t *testing.T, file string, drop map[string]string) (code []byte, kept, removed []string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	require.NoError(t, err)
	decls := f.Decls[:0]
	var gone []ast.Node // removed functions, with their doc comments
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if ok && fd.Recv == nil && isTest(fd.Name.Name) {
			if drop[fd.Name.Name] != "" {
				removed = append(removed, fd.Name.Name)
				gone = append(gone, fd)
				if fd.Doc != nil {
					gone = append(gone, fd.Doc)
				}
				continue
			}
			kept = append(kept, fd.Name.Name)
		}
		decls = append(decls, d)
	}
	f.Decls = decls
	// The comments of removed functions go with them (examples keep their
	// Output comments).
	comments := f.Comments[:0]
	for _, c := range f.Comments {
		inside := false
		for _, g := range gone {
			inside = inside || c.Pos() >= g.Pos() && c.End() <= g.End()
		}
		if !inside {
			comments = append(comments, c)
		}
	}
	f.Comments = comments
	dropUnusedImports(f)
	var buf bytes.Buffer
	require.NoError(t, format.Node(&buf, fset, f))
	return buf.Bytes(), kept, removed
}

// isTest reports whether name is a test or an example function.
func isTest(name string) bool {
	for _, p := range []string{"Test", "Example"} {
		if rest, ok := strings.CutPrefix(name, p); ok && (rest == "" || !isLower(rest[0])) {
			return name != "TestMain"
		}
	}
	return false
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }

// dropUnusedImports removes the imports no identifier of f refers to.
func dropUnusedImports(f *ast.File) {
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	var specs []ast.Spec
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if name == "_" || name == "." || used[name] {
			specs = append(specs, imp)
		}
	}
	for _, d := range f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.IMPORT {
			gd.Specs = specs
			specs = nil // one import declaration keeps them all
		}
	}
	f.Imports = nil
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o644))
}
