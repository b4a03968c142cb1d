package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// defaultParallel is the -test.parallel used when the caller did not set
// one. Scenarios spend nearly all their time waiting on timers (backoff,
// Retry-After, held responses), each with its own server, so the default of
// GOMAXPROCS (2 here) would serialise minutes of sleeping. CPU-heavy work
// (the soak) does not call t.Parallel.
const defaultParallel = 48

var (
	cliPath     string        // the e2e-cli binary, valid once cliReady is closed and cliBuildErr is nil
	cliBuildErr error         // why the e2e-cli could not be built
	cliReady    chan struct{} // closed when the build has finished
)

// TestMain builds e2e/e2e-cli once into a temporary directory (in the
// background, so tests that do not need it start at once), runs the tests
// and then checks that no goroutine leaked (goleak).
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			explicit = true
		}
	})
	if !explicit {
		_ = flag.Set("test.parallel", fmt.Sprint(defaultParallel))
	}

	dir, err := os.MkdirTemp("", "analytics-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(2)
	}
	cliReady = make(chan struct{})
	go func() {
		defer close(cliReady)
		cliPath, cliBuildErr = buildCLI(dir)
	}()

	code := m.Run()

	<-cliReady
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// buildCLI runs go build for ./e2e-cli (relative to this package), with
// -race when cliRace says so.
func buildCLI(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(dir, "e2e-cli")
	args := []string{"build", "-o", out}
	if cliRace() {
		args = append(args, "-race")
	}
	args = append(args, "./e2e-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %v: %v\n%s", args, err, stderr.String())
	}
	return out, nil
}

// cliRace reports whether the e2e-cli is built with -race (E2E_CLI_RACE=1).
// It is not by default: a race-instrumented CLI costs several times the CPU,
// and on a 2-core machine that load blurs the 0.25 s timing windows of
// docs/delivery.md §6.3. The SDK's concurrency runs under the race detector in-process
// here (TestSoak, the in-process parts of S34/S35/S46, TestR51Logging) and
// in the root package's tests.
func cliRace() bool { return os.Getenv("E2E_CLI_RACE") == "1" }

// needCLI returns the path of the e2e-cli binary, failing the test when it
// could not be built.
func needCLI(t testing.TB) string {
	t.Helper()
	<-cliReady
	if cliBuildErr != nil {
		t.Fatalf("e2e-cli did not build: %v", cliBuildErr)
	}
	return cliPath
}
