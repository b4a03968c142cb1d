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

// newcomerEnv is the environment of a newcomer's go commands: no workspace,
// and the machine's module proxy, as a newcomer has it. This repository's
// own modules come from the README's replace directives, never the proxy:
// the module is not published.
func newcomerEnv() []string {
	return append(env(), "GOWORK=off", "GOSUMDB=off", "GOFLAGS=-mod=mod")
}

// offline matches the go command's error for a package it may not look up
// (GOPROXY=off in the environment).
var offline = regexp.MustCompile(`providing package (\S+): module lookup disabled by GOPROXY=off`)

func runIn(t *testing.T, dir string, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env, cmd.WaitDelay = dir, newcomerEnv(), 5*time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// installFromREADME runs an install block of the README in app, a fresh
// module next to the "clone" (a link to this repository, standing in for
// the block's git clone line).
func installFromREADME(t *testing.T, app, block string) {
	t.Helper()
	var script []string
	for _, line := range strings.Split(block, "\n") {
		if strings.HasPrefix(line, "git clone ") {
			if !strings.HasSuffix(line, " ../analytics-go") {
				t.Fatalf("the README clones somewhere else than ../analytics-go: %q", line)
			}
			continue // the clone is the link made by newcomerModule
		}
		script = append(script, line)
	}
	if out, err := runIn(t, app, 3*time.Minute, "sh", "-ec", strings.Join(script, "\n")); err != nil {
		t.Fatalf("the README's install commands failed: %v\n%s\n%s", err, strings.Join(script, "\n"), out)
	}
}

// newcomerModule makes "your module" (go mod init) next to the clone.
func newcomerModule(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "analytics-go")); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runIn(t, app, time.Minute, "go", "mod", "init", "example.com/app"); err != nil {
		t.Fatalf("go mod init: %v\n%s", err, out)
	}
	return app
}

// The newcomer's path: a fresh module that follows the README's install
// and quick start word for word delivers an event to a local server, with
// no account and no network.
func TestREADMEQuickStartInAFreshModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a fresh module")
	}
	t.Parallel()
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(text)
	app := newcomerModule(t)
	installFromREADME(t, app, readmeBlock(t, readme, "## Install", "sh", 0))
	main := readmeBlock(t, readme, "## Quick start", "go", 0)
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runIn(t, app, 3*time.Minute, "go", "run", ".")
	if err != nil {
		t.Fatalf("go run . of the quick start: %v\n%s", err, out)
	}
	if want := "arrived: Signed Up from user-42\n"; !strings.HasSuffix(out, want) {
		t.Errorf("the quick start printed %q, want it to end with %q (the README says so)", out, want)
	}
	if !strings.Contains(readme, "It prints `arrived: Signed Up from user-42`.") {
		t.Error("the README no longer says what the quick start prints")
	}

	// The second install block adds analyticsotel, which needs its own
	// replace; a program using it then builds.
	installFromREADME(t, app, readmeBlock(t, readme, "## Install", "sh", 1))
	otel := `package main

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
	otelDir := filepath.Join(app, "cmd", "otel")
	if err := os.MkdirAll(otelDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(otelDir, "main.go"), []byte(otel), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runIn(t, app, 3*time.Minute, "go", "mod", "tidy"); err != nil {
		// Without network, a module the cache lacks cannot be found; only
		// a missing module of this repository is the README's fault.
		if m := offline.FindStringSubmatch(out); m != nil && !strings.HasPrefix(m[1], "github.com/relaykit/") {
			t.Skipf("%s is not in the module cache (the analyticsotel module's own tests download it): %s", m[1], out)
		}
		t.Fatalf("go mod tidy with analyticsotel: %v\n%s", err, out)
	}
	if out, err := runIn(t, app, 3*time.Minute, "go", "build", "./cmd/otel"); err != nil {
		t.Fatalf("go build with analyticsotel: %v\n%s", err, out)
	}
}
