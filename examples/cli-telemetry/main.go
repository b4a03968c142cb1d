// Command cli-telemetry shows durable mode in a short-lived program: a
// command-line tool that reports one usage event per run and exits at once,
// without making its user wait for the network. The event is on disk before
// Track returns; Close gets a short deadline, and whatever it could not send
// (the network is slow or down) stays on disk and goes out, with the same
// messageId, on a later run.
//
//	ANALYTICS_WRITE_KEY=<write key> go run ./examples/cli-telemetry <command>
//
// Settings (environment): ANALYTICS_WRITE_KEY (required), ANALYTICS_ENDPOINT
// (default https://api.segment.io), CLI_TELEMETRY_DIR (the disk buffer,
// default <user cache dir>/cli-telemetry-example/events).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/relaykit/analytics-go"
)

// closeDeadline is how long a run may wait for the network at exit.
const closeDeadline = 300 * time.Millisecond

func main() {
	command := "help"
	if len(os.Args) > 1 {
		command = os.Args[1]
	}
	if err := run(os.Stdout, os.Getenv, command); err != nil {
		fmt.Fprintln(os.Stderr, "cli-telemetry:", err)
		os.Exit(1)
	}
}

// run reports one "Command Run" event for command and prints what happened
// to w. getenv reads the settings (os.Getenv in main).
func run(w io.Writer, getenv func(string) string, command string) error {
	writeKey := getenv("ANALYTICS_WRITE_KEY")
	if writeKey == "" {
		return errors.New("set ANALYTICS_WRITE_KEY")
	}
	dir := getenv("CLI_TELEMETRY_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return err
		}
		dir = filepath.Join(cache, "cli-telemetry-example", "events")
	}
	var delivered atomic.Int64
	opts := []analytics.Option{
		analytics.WithOnSuccess(func(events []analytics.Message) { delivered.Add(int64(len(events))) }),
		analytics.WithMaxRetries(2), // a CLI should not retry for minutes: a later run tries again
	}
	if ep := getenv("ANALYTICS_ENDPOINT"); ep != "" {
		opts = append(opts, analytics.WithEndpoint(ep))
	}
	client, err := analytics.New(writeKey, append(opts, analytics.WithDiskBuffer(dir))...)
	if errors.Is(err, analytics.ErrDiskBufferLocked) {
		// Another run of the tool is using the buffer right now: report
		// this run's event without it (lost if it cannot be sent in time).
		fmt.Fprintln(w, "disk buffer in use by another run: sending without it")
		client, err = analytics.New(writeKey, opts...)
	}
	if err != nil {
		return err
	}
	if n := client.Stats().Replayed; n > 0 {
		fmt.Fprintf(w, "sending %d event(s) left by earlier runs\n", n)
	}

	id := analytics.NewMessageID()
	err = client.Track(analytics.Track{
		MessageID:   id,
		AnonymousID: "cli-telemetry-example",
		Event:       "Command Run",
		Properties:  analytics.Properties{"command": command},
	})
	if err != nil {
		fmt.Fprintf(w, "not tracked: %v\n", err)
	} else {
		fmt.Fprintf(w, "tracked %s\n", id)
	}

	ctx, cancel := context.WithTimeout(context.Background(), closeDeadline)
	defer cancel()
	closeErr := client.Close(ctx)
	st := client.Stats()
	fmt.Fprintf(w, "delivered %d event(s)\n", delivered.Load())
	if st.HandedBack > 0 {
		fmt.Fprintf(w, "kept %d event(s) on disk for a later run\n", st.HandedBack)
	}
	if closeErr != nil && !errors.Is(closeErr, analytics.ErrShutdownInterrupted) {
		return closeErr
	}
	return nil
}
