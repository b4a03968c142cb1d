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
	fail := func(err error) int {
		fmt.Fprintf(stderr, "e2e-cli: %s\n", err)
		writeLine(stdout, failureOutput{Error: err.Error()})
		return 1
	}
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

	rec := newRecorder()
	rec.durable = p.durable
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	opts := append([]analytics.Option{
		analytics.WithLogger(log),
		analytics.WithHTTPClient(&http.Client{Transport: &observingTransport{base: transport, rec: rec}}),
		analytics.WithOnSuccess(rec.onSuccess),
		analytics.WithOnError(rec.onError),
	}, p.opts...)
	client, err := analytics.New(p.writeKey, opts...)
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
			id := ev.MessageID
			if id == "" {
				id = analytics.NewMessageID() // the SDK's own generator
			}
			n := rec.add(id, ev.MessageID)
			if err := enqueue(client, ev, id); err != nil {
				rec.reject(n, err)
				cli.Debug("enqueue rejected", zap.Int("sequence", i), zap.String("messageId", id), zap.Error(err))
			}
		}
		if seq.flush {
			ctx, cancel := context.WithTimeout(context.Background(), p.flushTimeout)
			start := time.Now()
			err := client.Flush(ctx)
			cancel()
			f := flushOutput{Sequence: i, MS: time.Since(start).Milliseconds()}
			if err != nil {
				f.Error = err.Error()
			}
			cli.Debug("flush returned", zap.Int("sequence", i), zap.Int64("ms", f.MS), zap.Error(err))
			flushes = append(flushes, f)
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
		after = &afterCloseState{
			TrackError: errText(trackErr), TrackKind: kind(trackErr),
			CloseError: errText(closeErr2), CloseKind: kind(closeErr2),
		}
	}

	if p.durable {
		rec.kept(client.Stats().OnDisk) // after Close: the events it kept on disk, without a callback
	}
	out, notes := rec.report()
	notes = append(notes, accounting(client, len(rec.events)-out.Rejected)...)
	out.Flushes = flushes
	out.CloseError = errText(closeErr)
	out.AfterClose = after
	for _, n := range notes {
		fmt.Fprintf(stderr, "e2e-cli: warning: %s\n", n)
	}
	if !out.Success {
		fmt.Fprintf(stderr, "e2e-cli: %s\n", out.Error)
	}
	writeLine(stdout, out)
	if out.Success {
		return 0
	}
	return 1
}

// enqueue calls the SDK method that matches the event's type.
func enqueue(c *analytics.Client, ev inputEvent, id string) error {
	switch ev.Type {
	case "track":
		return c.Track(analytics.Track{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, Event: ev.Event,
			Timestamp: ev.timestamp, Properties: ev.Properties, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "identify":
		return c.Identify(analytics.Identify{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID,
			Timestamp: ev.timestamp, Traits: ev.Traits, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "group":
		return c.Group(analytics.Group{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, GroupID: ev.GroupID,
			Timestamp: ev.timestamp, Traits: ev.Traits, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "page":
		return c.Page(analytics.Page{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, Name: ev.Name, Category: ev.Category,
			Timestamp: ev.timestamp, Properties: ev.Properties, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "screen":
		return c.Screen(analytics.Screen{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, Name: ev.Name, Category: ev.Category,
			Timestamp: ev.timestamp, Properties: ev.Properties, Context: ev.Context, Integrations: ev.Integrations,
		})
	case "alias":
		return c.Alias(analytics.Alias{
			MessageID: id, UserID: ev.UserID, AnonymousID: ev.AnonymousID, PreviousID: ev.PreviousID,
			Timestamp: ev.timestamp, Context: ev.Context, Integrations: ev.Integrations,
		})
	}
	// parseEvent admits only the six types above.
	return fmt.Errorf("unknown event type %q", ev.Type)
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

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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
