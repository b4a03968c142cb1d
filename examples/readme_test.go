package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the n-th (from 0) fenced code block of the given
// language in the README section that starts with heading.
func readmeBlock(t *testing.T, readme, heading, lang string, n int) string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no section %q", heading)
	}
	section := readme[i+1:]
	if j := strings.Index(section[len(heading):], "\n## "); j >= 0 {
		section = section[:len(heading)+j]
	}
	for _, part := range strings.Split(section, "```"+lang+"\n")[1:] {
		code, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("unterminated code block in README section %q", heading)
		}
		if n == 0 {
			return code
		}
		n--
	}
	t.Fatalf("README section %q has too few %s blocks", heading, lang)
	return ""
}

// newcomerEnv is the environment of a newcomer's go commands: the
// machine's module proxy and toolchain, and go's defaults otherwise (no
// GOFLAGS such as -mod=mod, which would hide a missing require, and no
// GOWORK: the workspace route makes its own go.work). This repository's
// own modules come from the README's replace directives or workspace,
// never the proxy: the module is not published. The checksum database is
// off, so that the proxy is the only network the test needs.
func newcomerEnv() []string {
	var out []string
	for _, kv := range env() {
		if strings.HasPrefix(kv, "GOFLAGS=") || strings.HasPrefix(kv, "GOWORK=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GOFLAGS=", "GOSUMDB=off")
}

// offline matches the go command's error for a module it may not download
// (GOPROXY=off in the environment, or no network).
var offline = regexp.MustCompile(`(?:providing package|module) (\S+): (?:module lookup disabled by GOPROXY=off|.*dial tcp)`)

func runIn(t *testing.T, dir string, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env, cmd.WaitDelay = dir, newcomerEnv(), 5*time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// newcomer follows the README in an empty directory, as a newcomer does:
// each step runs in the directory the previous one left them in.
type newcomer struct {
	t      *testing.T
	readme string
	root   string // this repository, standing in for the clone
	dir    string // the current directory
}

func newNewcomer(t *testing.T) *newcomer {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a fresh module")
	}
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return &newcomer{t: t, readme: string(text), root: root, dir: t.TempDir()}
}

// sh runs the n-th sh block of the README's Install section, line by line
// as written, except that the git clone line links this repository where
// the clone would go (the test runs without GitHub). A line "cd x" moves
// the newcomer into x for the following steps.
func (n *newcomer) sh(block int) {
	t := n.t
	t.Helper()
	code := readmeBlock(t, n.readme, "## Install", "sh", block)
	var script []string
	dir := n.dir
	for _, line := range strings.Split(strings.ReplaceAll(code, "\\\n", ""), "\n") {
		if strings.HasPrefix(line, "git clone ") {
			dest := strings.Fields(line)[len(strings.Fields(line))-1]
			if dest != "../analytics-go" {
				t.Fatalf("the README clones to %s, not next to the module (../analytics-go)", dest)
			}
			line = "ln -s " + n.root + " " + dest
		}
		for _, cmd := range strings.Split(line, "&&") {
			if f := strings.Fields(cmd); len(f) == 2 && f[0] == "cd" {
				dir = filepath.Join(dir, f[1])
			}
		}
		script = append(script, line)
	}
	n.run("sh", "-ec", strings.Join(script, "\n"))
	n.dir = dir
}

// run runs one command in the current directory; it skips the test when
// the only trouble is a third-party module that cannot be downloaded,
// except in CI (CI=true), which has the module proxy.
func (n *newcomer) run(name string, args ...string) string {
	t := n.t
	t.Helper()
	out, err := runIn(t, n.dir, 4*time.Minute, name, args...)
	if err != nil {
		if m := offline.FindStringSubmatch(out); m != nil && !strings.HasPrefix(m[1], "github.com/relaykit/") && os.Getenv("CI") != "true" {
			t.Skipf("%s cannot be downloaded here (no module proxy; under CI=true this fails): %s", m[1], out)
		}
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), n.dir, err, out)
	}
	return out
}

// write saves a file in the current directory.
func (n *newcomer) write(name, text string) {
	n.t.Helper()
	path := filepath.Join(n.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// quickStart saves the README's quick start as main.go.
func (n *newcomer) quickStart() {
	n.t.Helper()
	n.write("main.go", readmeBlock(n.t, n.readme, "## Quick start", "go", 0))
}

// checkQuickStartOutput checks that go run . printed what the README says.
func (n *newcomer) checkQuickStartOutput(out string) {
	n.t.Helper()
	if want := "arrived: Signed Up from user-42\n"; !strings.HasSuffix(out, want) {
		n.t.Errorf("the quick start printed %q, want it to end with %q (the README says so)", out, want)
	}
	if !strings.Contains(n.readme, "It prints `arrived: Signed Up from user-42`.") {
		n.t.Error("the README no longer says what the quick start prints")
	}
}

// otelProgram is a program that uses analyticsotel, as the README's
// analyticsotel step assumes ("import … in your code").
const otelProgram = `package main

import (
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticsotel"
)

func main() {
	m, err := analyticsotel.New(noop.NewMeterProvider())
	if err != nil {
		panic(err)
	}
	_ = []analytics.Option{m.Option()}
}
`

// The newcomer's path with replace directives: an empty directory, the
// README's Install commands in the order written, the quick start saved
// where the README says, and `go mod tidy` and `go run .` deliver an
// event to a local server, with no account. Then analyticsotel's step
// builds a program that imports it. Run with go's defaults (no
// -mod=mod), so a require that go mod tidy dropped fails the test.
func TestREADMEInstallWithReplaceInAnEmptyDirectory(t *testing.T) {
	n := newNewcomer(t)
	t.Parallel()
	n.sh(0) // mkdir app && cd app; go mod init; git clone
	if _, err := os.Stat(filepath.Join(n.dir, "go.mod")); err != nil {
		t.Fatalf("after the README's first step there is no go.mod in %s: %v", n.dir, err)
	}
	n.sh(1) // go mod edit -require -replace
	n.quickStart()
	n.checkQuickStartOutput(n.run("sh", "-ec", readmeBlock(t, n.readme, "## Install", "sh", 2))) // go mod tidy; go run .

	n.write(filepath.Join("cmd", "otel", "main.go"), otelProgram)
	n.sh(3) // analyticsotel: go mod edit; go mod tidy
	n.run("go", "build", "./cmd/otel")
	n.run("go", "vet", "./...")
}

// The workspace route: the same empty directory and clone, then go work
// init with both of this repository's modules, and the quick start and a
// program using analyticsotel build and run with no go.mod edit and no
// go mod tidy, as the README says.
func TestREADMEInstallWithWorkspaceInAnEmptyDirectory(t *testing.T) {
	n := newNewcomer(t)
	t.Parallel()
	n.sh(0)
	n.sh(4) // go work init . ../analytics-go ../analytics-go/analyticsotel
	if !strings.Contains(n.readme, "Then save `main.go` and `go run .`; no `go mod tidy`") {
		t.Fatal("the README no longer says what to run in a workspace; update this test with it")
	}
	n.quickStart()
	n.checkQuickStartOutput(n.run("go", "run", "."))
	n.write(filepath.Join("cmd", "otel", "main.go"), otelProgram)
	n.run("go", "build", "./cmd/otel")
	n.run("go", "vet", "./...")
}
