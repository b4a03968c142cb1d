package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

// attemptLog records every request (start, end, status, X-Retry-Count and
// the batch's first messageId) when BENCH_ATTEMPT_LOG names a file: a
// diagnosis aid for retry tails (ours only). It wraps the client's
// transport, so it costs a copy of every body. The file has one line per
// request, "start end status retry id" (seconds from New), "# close" and
// "# closed" marks, and a summary: every wait between a batch's attempts,
// and the attempts of the batch answered last.
type attemptLogT struct {
	mu    sync.Mutex
	path  string
	start time.Time
	rows  []string
	reqs  []attemptRow
	close float64
	next  http.RoundTripper
}

type attemptRow struct {
	start, end float64
	status     int
	id         string
}

var attemptLog *attemptLogT

func startAttemptLog(path string) *attemptLogT {
	return &attemptLogT{path: path, start: time.Now(), next: http.DefaultTransport.(*http.Transport).Clone()}
}

func (l *attemptLogT) RoundTrip(req *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	id := ""
	if i := bytes.Index(body, []byte(`"messageId":"`)); i >= 0 {
		rest := body[i+13:]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			id = string(rest[:j])
		}
	}
	s := time.Now()
	resp, err := l.next.RoundTrip(req)
	e := time.Now()
	st := 0
	if resp != nil {
		st = resp.StatusCode
	}
	rc := req.Header.Get("X-Retry-Count")
	if rc == "" {
		rc = "0"
	}
	l.mu.Lock()
	row := attemptRow{s.Sub(l.start).Seconds(), e.Sub(l.start).Seconds(), st, id}
	l.rows = append(l.rows, fmt.Sprintf("%.4f %.4f %d %s %s", row.start, row.end, st, rc, id))
	l.reqs = append(l.reqs, row)
	l.mu.Unlock()
	return resp, err
}

func (l *attemptLogT) note(what string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	at := time.Since(l.start).Seconds()
	if what == "close" {
		l.close = at
	}
	l.rows = append(l.rows, fmt.Sprintf("%.4f # %s", at, what))
	l.mu.Unlock()
}

func (l *attemptLogT) write() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.Create(l.path)
	if err != nil {
		return
	}
	for _, r := range l.rows {
		fmt.Fprintln(f, r)
	}
	byID := map[string][]attemptRow{}
	var last []attemptRow
	for _, r := range l.reqs {
		byID[r.id] = append(byID[r.id], r)
	}
	var waits []float64
	for _, rs := range byID {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
		for i := 1; i < len(rs); i++ {
			waits = append(waits, rs[i].start-rs[i-1].end)
		}
		if last == nil || rs[len(rs)-1].end > last[len(last)-1].end {
			last = rs
		}
	}
	sort.Float64s(waits)
	if len(waits) > 0 {
		over := len(waits) - sort.SearchFloat64s(waits, 0.56)
		fmt.Fprintf(f, "# waits: %d, shortest %.3f s, longest %.3f s, %d over 0.56 s\n", len(waits), waits[0], waits[len(waits)-1], over)
	}
	for _, r := range last {
		fmt.Fprintf(f, "# last batch: attempt at %+.3f s from Close, answered %d\n", r.start-l.close, r.status)
	}
	f.Close()
}
