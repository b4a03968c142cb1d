package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"sync"

	"github.com/relaykit/analytics-go"
)

// deadLetters keeps the events that were not delivered (OnError) in a file,
// one JSON object per line in the tracking API's format, and sends them
// again at the next start. They keep their messageId, so the API drops an
// event that did arrive after all.
//
// At start the file is renamed to path+".resend" (appended to one left by
// a run that died), whose events are enqueued again; this run's failures
// go to a new file at path; once Close has returned, every re-sent event
// has its outcome (delivered, or written to path again), and the .resend
// file is removed. A crash in between leaves it for the next start.
type deadLetters struct {
	path string

	mu  sync.Mutex
	f   *os.File
	enc *json.Encoder
}

// openDeadLetters prepares path and returns the events to send again.
func openDeadLetters(path string) (*deadLetters, []analytics.Message, error) {
	resend := path + ".resend"
	if err := appendFile(resend, path); err != nil {
		return nil, nil, err
	}
	msgs, err := readMessages(resend)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return &deadLetters{path: path, f: f, enc: json.NewEncoder(f)}, msgs, nil
}

// appendFile moves the contents of src to the end of dst and removes src;
// a missing src is nothing to move.
func appendFile(dst, src string) error {
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Remove(src)
}

// readMessages reads the events of a dead-letter file; a line that is not
// an event is logged and skipped.
func readMessages(path string) ([]analytics.Message, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var msgs []analytics.Message
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20) // an event is at most 32 KB; leave room
	for n := 1; lines.Scan(); n++ {
		if len(lines.Bytes()) == 0 {
			continue
		}
		m, err := analytics.UnmarshalMessage(lines.Bytes())
		if err != nil {
			log.Printf("%s:%d: skipped: %v", path, n, err)
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs, lines.Err()
}

// write is the OnError callback: it appends the events to the file. It
// runs on the client's goroutines, possibly concurrently.
func (d *deadLetters) write(err error, events []analytics.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range events {
		if werr := d.enc.Encode(m); werr != nil {
			log.Printf("dead letter not written (%v): event %s lost", werr, m.ID())
		}
	}
	if serr := d.f.Sync(); serr != nil {
		log.Printf("dead letters: %v", serr)
	}
}

// close ends the file, after Client.Close: the events sent again have
// their outcome, so the .resend file is done with.
func (d *deadLetters) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.f.Close(); err != nil {
		return err
	}
	if err := os.Remove(d.path + ".resend"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dead letters: %w", err)
	}
	return nil
}
