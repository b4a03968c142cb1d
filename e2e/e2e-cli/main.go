// Command e2e-cli drives github.com/relaykit/analytics-go for end-to-end
// tests: Segment's cross-SDK conformance suite and our own (contract: README.md).
//
//	e2e-cli --input '<json>'      (also --input=<json>)
//	e2e-cli --input-file PATH     (PATH "-" reads stdin)
//	e2e-cli --debug ...           (SDK logs to stderr)
//
// It builds a client from the input's config, enqueues the input's events
// sequence by sequence, closes the client and prints exactly one JSON line
// on stdout describing the outcome of every event. Diagnostics go to
// stderr. The exit code is 0 exactly when the line says "success": true.
// README.md documents every input and output field.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/relaykit/analytics-go"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the whole CLI; it returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int { return printFailure(stdout, stderr, err) }
	fl, err := parseFlags(args, stderr)
	if err != nil {
		return fail(err)
	}
	data, err := fl.read(stdin)
	if err != nil {
		return fail(err)
	}
	p, err := parseInput(data)
	if err != nil {
		return fail(err)
	}

	log := zap.NewNop()
	if fl.debug {
		log = newDebugLogger(stderr)
	}
	defer func() { _ = log.Sync() }()

	rec := newRecorder(p.durable)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	client, err := p.newClient(
		analytics.WithLogger(log),
		analytics.WithHTTPClient(&http.Client{Transport: rec.observe(transport)}),
		analytics.WithOnSuccess(rec.onSuccess),
		analytics.WithOnError(rec.onError),
	)
	if err != nil {
		return fail(configError(err))
	}
	cli := log.Named("e2e-cli")
	cli.Debug("client built", zap.Stringer("config", client.Config()))

	var flushes []flushOutput
	for i, seq := range p.sequences {
		if seq.delay > 0 {
			time.Sleep(seq.delay)
		}
		for _, ev := range seq.events {
			// The CLI stamps the ids it needs to correlate callbacks with
			// input events; the SDK sends a given id unchanged (R2).
			id, inputID := ev.ids()
			n := rec.add(id, inputID)
			if err := ev.enqueue(client, id); err != nil {
				rec.reject(n, err)
				cli.Debug("enqueue rejected", zap.Int("sequence", i), zap.String("messageId", id), zap.Error(err))
			}
		}
		if seq.flush {
			ctx, cancel := context.WithTimeout(context.Background(), p.flushTimeout)
			start := time.Now()
			err := client.Flush(ctx)
			cancel()
			took := time.Since(start)
			cli.Debug("flush returned", zap.Int("sequence", i), zap.Int64("ms", took.Milliseconds()), zap.Error(err))
			flushes = append(flushes, newFlushOutput(i, took, err))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), p.closeTimeout)
	closeErr := client.Close(ctx)
	cancel()
	cli.Debug("close returned", zap.Error(closeErr))

	var after *afterCloseState
	if p.afterClose {
		// S46: an ordinary valid event after Close, then a second Close.
		trackErr := client.Track(analytics.Track{UserID: "e2e-cli", Event: "e2e-cli after close"})
		ctx, cancel := context.WithTimeout(context.Background(), p.closeTimeout)
		closeErr2 := client.Close(ctx)
		cancel()
		after = newAfterClose(trackErr, closeErr2)
	}

	if p.durable {
		rec.kept(client.Stats().OnDisk) // after Close: the events it kept on disk, without a callback
	}
	out, notes := rec.report(flushes, closeErr, after)
	notes = append(notes, accounting(client, rec.accepted())...)
	return out.print(stdout, stderr, notes)
}

// cliFlags are the command-line flags.
type cliFlags struct {
	input     string
	inputFile string
	inputSet  bool
	fileSet   bool
	debug     bool
}

func parseFlags(args []string, stderr io.Writer) (cliFlags, error) {
	var f cliFlags
	fs := flag.NewFlagSet("e2e-cli", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.input, "input", "", "the input `JSON` (see README.md)")
	fs.StringVar(&f.inputFile, "input-file", "", "read the input JSON from `PATH` (\"-\" = stdin)")
	fs.BoolVar(&f.debug, "debug", false, "write the SDK's logs (zap development logger) to stderr")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "input":
			f.inputSet = true
		case "input-file":
			f.fileSet = true
		}
	})
	switch {
	case f.inputSet && f.fileSet:
		return f, errors.New("give --input or --input-file, not both")
	case !f.inputSet && !f.fileSet:
		return f, errors.New("missing --input (or --input-file)")
	}
	return f, nil
}

// read returns the input JSON from the flag, the file or stdin.
func (f cliFlags) read(stdin io.Reader) ([]byte, error) {
	switch {
	case f.inputSet:
		return []byte(f.input), nil
	case f.inputFile == "-":
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("--input-file -: reading stdin: %w", err)
		}
		return data, nil
	default:
		data, err := os.ReadFile(f.inputFile)
		if err != nil {
			return nil, fmt.Errorf("--input-file: %w", err)
		}
		return data, nil
	}
}

// newDebugLogger is zap's development logger, writing to stderr.
func newDebugLogger(stderr io.Writer) *zap.Logger {
	w := zapcore.Lock(zapcore.AddSync(stderr)) // the SDK logs from several goroutines
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), w, zapcore.DebugLevel)
	return zap.New(core, zap.Development(), zap.AddCaller(), zap.AddStacktrace(zapcore.WarnLevel), zap.ErrorOutput(w))
}

// accounting checks the client's counters once Close has returned: every
// accepted event (the input's, and those replayed from a disk buffer) has
// exactly one outcome (R41, R42). It waits up to 1 s for callbacks that
// outlived Close. Each line it returns starts with "accounting:"; the e2e
// harness fails a scenario on one.
func accounting(c *analytics.Client, accepted int) []string {
	st := c.Stats()
	for i := 0; i < 100 && st.Pending > 0; i++ {
		time.Sleep(10 * time.Millisecond)
		st = c.Stats()
	}
	var bad []string
	if st.Pending != 0 {
		bad = append(bad, fmt.Sprintf("accounting: %d event(s) pending after Close", st.Pending))
	}
	if st.Accepted != int64(accepted) {
		bad = append(bad, fmt.Sprintf("accounting: Stats.Accepted %d, %d input event(s) accepted", st.Accepted, accepted))
	}
	if in, out := st.Accepted+st.Replayed, st.Delivered+st.Failed+st.HandedBack; in != out {
		bad = append(bad, fmt.Sprintf("accounting: Accepted+Replayed %d, Delivered+Failed+HandedBack %d", in, out))
	}
	if st.Batches > st.Requests || st.Batches > st.Delivered || st.Retries > st.Requests {
		bad = append(bad, fmt.Sprintf("accounting: Batches %d, Retries %d, Requests %d, Delivered %d do not fit",
			st.Batches, st.Retries, st.Requests, st.Delivered))
	}
	return bad
}
