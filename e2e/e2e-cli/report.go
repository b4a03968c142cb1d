package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/relaykit/analytics-go"
)

// This file records what happened to each input event (enqueue result,
// callbacks, HTTP statuses) and renders the output line (README.md, Output).

// Outcomes of an input event.
const (
	outcomeDelivered  = "delivered"
	outcomeFailed     = "failed"
	outcomeHandedBack = "handed back"
	outcomeRejected   = "rejected"
	// outcomeNone marks an accepted event that got no callback. It can only
	// appear if the SDK broke "exactly one disposition" (R42, INV1).
	outcomeNone = "none"
)

// kind names the error class of err (README.md, Output), found with errors.Is and
// errors.As in a fixed order, never by matching text. nil has no kind.
func kind(err error) string {
	var httpErr *analytics.HTTPError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, analytics.ErrQueueFull):
		return "queue-full"
	case errors.Is(err, analytics.ErrClosed):
		return "closed"
	case errors.Is(err, analytics.ErrEventTooLarge):
		return "too-large"
	case errors.Is(err, analytics.ErrInvalidMessage):
		return "invalid"
	case errors.Is(err, analytics.ErrShutdownInterrupted):
		return "shutdown-interrupted"
	case errors.Is(err, analytics.ErrRetriesExhausted):
		return "retries-exhausted"
	case errors.Is(err, analytics.ErrBackoffDurationExceeded):
		return "backoff-duration-exceeded"
	case errors.Is(err, analytics.ErrRateLimitDurationExceeded):
		return "rate-limit-duration-exceeded"
	case errors.Is(err, analytics.ErrOAuth):
		return "oauth"
	case errors.As(err, &httpErr) && httpErr.Kind == analytics.KindRedirect:
		return "redirect"
	case errors.As(err, &httpErr):
		return "non-retryable"
	default:
		return "transport"
	}
}

// eventState is what is known about one input event.
type eventState struct {
	id        string // the messageId sent (input's, or assigned by the CLI)
	inputID   string // the messageId of the input ("" if none)
	rejectErr error  // the enqueue error, nil if accepted
	callbacks int
	outcome   string // from the first callback
	err       error  // OnError's error for failed and handed-back events
}

// recorder is the state shared between the CLI's goroutine, the SDK's
// callbacks (which run concurrently on consumer goroutines and on the
// goroutine calling Close) and the observing transport. One mutex guards it.
type recorder struct {
	mu          sync.Mutex
	events      []*eventState
	byID        map[string][]int // sent messageId → indexes of events, in input order
	lastStatus  map[string]int   // messageId → status of the last response to a request carrying it
	sentBatches int
	firstErr    string // message of the first failure (failure-kind OnError or enqueue error)
	stray       int    // callback messages that match no input event
	durable     bool   // diskBufferDir: stray messages are events replayed from an earlier run
	replayed    replayedOutput
	keptOnDisk  int64 // durable mode: events Close kept in the disk buffer, which get no callback (Stats.OnDisk)
}

// newRecorder returns an empty recorder; durable says that the client
// has a disk buffer (config.diskBufferDir), from which events of an
// earlier run may be replayed.
func newRecorder(durable bool) *recorder {
	return &recorder{byID: map[string][]int{}, lastStatus: map[string]int{}, durable: durable}
}

// add registers an event before it is enqueued, so a callback that runs
// before the enqueue call returns still finds it.
func (r *recorder) add(id, inputID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.events)
	r.events = append(r.events, &eventState{id: id, inputID: inputID})
	r.byID[id] = append(r.byID[id], i)
	return i
}

// kept records how many events Close kept in the disk buffer (durable
// mode): they get no callback, so report counts the input events without
// one as handed back, up to n, and the rest as replayed events kept again.
func (r *recorder) kept(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keptOnDisk = n
}

// reject records the enqueue error of event i. A rejected event gets no
// callback, so it stops matching callback messages.
func (r *recorder) reject(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events[i]
	ev.rejectErr = err
	idx := r.byID[ev.id]
	for k, j := range idx {
		if j == i {
			r.byID[ev.id] = append(idx[:k:k], idx[k+1:]...)
			break
		}
	}
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

// onSuccess is the OnSuccess callback: one call per batch answered 2xx.
func (r *recorder) onSuccess(msgs []analytics.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sentBatches++
	for _, m := range msgs {
		r.settle(m.ID(), outcomeDelivered, nil)
	}
}

// onError is the OnError callback: failed or handed-back events.
func (r *recorder) onError(err error, msgs []analytics.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	outcome := outcomeFailed
	if errors.Is(err, analytics.ErrShutdownInterrupted) {
		outcome = outcomeHandedBack // not a delivery failure (R38)
	} else if r.firstErr == "" {
		r.firstErr = err.Error()
	}
	for _, m := range msgs {
		r.settle(m.ID(), outcome, err)
	}
}

// settle attributes one callback message to the first event with that id
// that has no callback yet (ids may repeat in the input). r.mu is held.
func (r *recorder) settle(id, outcome string, err error) {
	idx := r.byID[id]
	if len(idx) == 0 {
		if r.durable {
			r.replayed.count(outcome)
			return
		}
		r.stray++
		return
	}
	target := idx[len(idx)-1] // every event with this id already settled: a duplicate callback
	for _, i := range idx {
		if r.events[i].callbacks == 0 {
			target = i
			break
		}
	}
	ev := r.events[target]
	ev.callbacks++
	if ev.callbacks == 1 {
		ev.outcome, ev.err = outcome, err
	}
}

// accepted counts the input events the client accepted (all but those
// whose enqueue was rejected).
func (r *recorder) accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if ev.rejectErr == nil {
			n++
		}
	}
	return n
}

// noteStatus records the status of a response to a request carrying ids.
func (r *recorder) noteStatus(ids []string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.lastStatus[id] = status
	}
}

// observingTransport reports the status of every response to the recorder,
// per messageId of the request's batch, so the output can give delivered
// events their real 2xx status (OnSuccess does not carry it) and others the
// status of the last response received. It reads a copy of the body
// (GetBody) and changes nothing on the request or the response.
type observingTransport struct {
	base http.RoundTripper
	rec  *recorder
}

// observe returns a RoundTripper that makes requests with base and reports
// their statuses to r.
func (r *recorder) observe(base http.RoundTripper) http.RoundTripper {
	return &observingTransport{base: base, rec: r}
}

func (t *observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ids := batchIDs(req)
	resp, err := t.base.RoundTrip(req)
	if err == nil && len(ids) > 0 {
		t.rec.noteStatus(ids, resp.StatusCode)
	}
	return resp, err
}

// batchIDs returns the messageIds of the batch a request carries, or nil.
func batchIDs(req *http.Request) []string {
	if req.GetBody == nil {
		return nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer body.Close()
	var rd io.Reader = body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil
		}
		defer zr.Close()
		rd = zr
	}
	var payload struct {
		Batch []struct {
			MessageID string `json:"messageId"`
		} `json:"batch"`
	}
	if json.NewDecoder(rd).Decode(&payload) != nil {
		return nil
	}
	ids := make([]string, len(payload.Batch))
	for i, e := range payload.Batch {
		ids[i] = e.MessageID
	}
	return ids
}

// output is the line printed on stdout (README.md, Output).
type output struct {
	Success     bool             `json:"success"`
	SentBatches int              `json:"sentBatches"`
	Error       string           `json:"error,omitempty"`
	Delivered   int              `json:"delivered"`
	Failed      int              `json:"failed"`
	HandedBack  int              `json:"handedBack"`
	Rejected    int              `json:"rejected"`
	Events      []eventOutput    `json:"events"`
	CloseError  string           `json:"closeError,omitempty"`
	Flushes     []flushOutput    `json:"flushes,omitempty"`
	AfterClose  *afterCloseState `json:"afterClose,omitempty"`
	Replayed    *replayedOutput  `json:"replayed,omitempty"`
}

// replayedOutput counts, by outcome, the events an earlier run left in the
// disk buffer (config.diskBufferDir) that this run's client sent.
type replayedOutput struct {
	Delivered  int `json:"delivered"`
	Failed     int `json:"failed"`
	HandedBack int `json:"handedBack"`
}

func (o *replayedOutput) count(outcome string) {
	switch outcome {
	case outcomeDelivered:
		o.Delivered++
	case outcomeFailed:
		o.Failed++
	default:
		o.HandedBack++
	}
}

// failureOutput is the line for input that never reached the SDK: a run
// error or a configuration analytics.New rejected. No request was made.
type failureOutput struct {
	Success     bool   `json:"success"`
	SentBatches int    `json:"sentBatches"`
	Error       string `json:"error"`
}

type eventOutput struct {
	MessageID string `json:"messageId"`
	Outcome   string `json:"outcome"`
	Kind      string `json:"kind,omitempty"`
	Status    int    `json:"status,omitempty"`
	Error     string `json:"error,omitempty"`
	Callbacks int    `json:"callbacks"`
}

type flushOutput struct {
	Sequence int    `json:"sequence"`
	MS       int64  `json:"ms"`
	Error    string `json:"error,omitempty"`
}

// newFlushOutput is the record of sequence i's Flush, which took took and
// returned err.
func newFlushOutput(i int, took time.Duration, err error) flushOutput {
	return flushOutput{Sequence: i, MS: took.Milliseconds(), Error: errText(err)}
}

type afterCloseState struct {
	TrackError string `json:"trackError"`
	TrackKind  string `json:"trackKind"`
	CloseError string `json:"closeError"`
	CloseKind  string `json:"closeKind"`
}

// newAfterClose is the record of the Track call after Close, which
// returned trackErr, and of the second Close, which returned closeErr.
func newAfterClose(trackErr, closeErr error) *afterCloseState {
	return &afterCloseState{
		TrackError: errText(trackErr), TrackKind: kind(trackErr),
		CloseError: errText(closeErr), CloseKind: kind(closeErr),
	}
}

// report builds the output from the recorded state and the run's flushes,
// Close error and after-Close record; call it after Close. It also returns
// notes for stderr about anything that breaks INV1.
func (r *recorder) report(flushes []flushOutput, closeErr error, after *afterCloseState) (output, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := output{
		SentBatches: r.sentBatches, Events: make([]eventOutput, 0, len(r.events)),
		Flushes: flushes, CloseError: errText(closeErr), AfterClose: after,
	}
	var notes []string
	missing := 0
	for _, ev := range r.events {
		e := eventOutput{MessageID: ev.id, Callbacks: ev.callbacks}
		switch {
		case ev.rejectErr != nil:
			out.Rejected++
			e.MessageID = ev.inputID // the CLI's id was never sent
			e.Outcome, e.Kind, e.Error = outcomeRejected, kind(ev.rejectErr), ev.rejectErr.Error()
		case ev.callbacks == 0 && r.keptOnDisk > 0:
			// Kept in the disk buffer for the next run: handed back, without
			// a callback (the next run's callback is its outcome).
			r.keptOnDisk--
			out.HandedBack++
			e.Outcome, e.Kind = outcomeHandedBack, "shutdown-interrupted"
			e.Error = "kept in the disk buffer for the next run"
		case ev.callbacks == 0:
			missing++
			e.Outcome = outcomeNone
		case ev.outcome == outcomeDelivered:
			out.Delivered++
			e.Outcome, e.Status = outcomeDelivered, http.StatusOK
			if s := r.lastStatus[ev.id]; s >= 200 && s <= 299 {
				e.Status = s
			}
		default:
			if ev.outcome == outcomeFailed {
				out.Failed++
			} else {
				out.HandedBack++
			}
			e.Outcome, e.Kind = ev.outcome, kind(ev.err)
			if ev.err != nil {
				e.Error = ev.err.Error()
			}
			var httpErr *analytics.HTTPError
			if errors.As(ev.err, &httpErr) {
				e.Status = httpErr.StatusCode
			} else {
				e.Status = r.lastStatus[ev.id] // 0 (absent) when no response was received
			}
		}
		if ev.callbacks > 1 {
			notes = append(notes, fmt.Sprintf("event %q appeared in %d callback calls (want 1)", ev.id, ev.callbacks))
		}
		out.Events = append(out.Events, e)
	}
	if missing > 0 {
		notes = append(notes, fmt.Sprintf("%d accepted events got no callback", missing))
	}
	if r.stray > 0 {
		notes = append(notes, fmt.Sprintf("%d callback messages matched no input event", r.stray))
	}

	if r.durable {
		rep := r.replayed
		rep.HandedBack += int(r.keptOnDisk) // replayed events kept again
		r.keptOnDisk = 0
		out.Replayed = &rep
	}
	switch {
	case r.firstErr != "":
		out.Error = r.firstErr
	case out.HandedBack > 0:
		out.Error = fmt.Sprintf("delivery incomplete: %d events handed back at shutdown", out.HandedBack)
	case r.replayed.HandedBack > 0:
		out.Error = fmt.Sprintf("delivery incomplete: %d replayed events handed back at shutdown", r.replayed.HandedBack)
	case missing > 0:
		out.Error = fmt.Sprintf("delivery incomplete: %d accepted events got no callback", missing)
	default:
		out.Success = true
	}
	return out, notes
}

// print writes notes as warnings and, when the run failed, its error to
// stderr, then the output line to stdout; it returns the exit code: 0
// exactly when the line says "success": true.
func (o output) print(stdout, stderr io.Writer, notes []string) int {
	for _, n := range notes {
		fmt.Fprintf(stderr, "e2e-cli: warning: %s\n", n)
	}
	if !o.Success {
		fmt.Fprintf(stderr, "e2e-cli: %s\n", o.Error)
	}
	writeLine(stdout, o)
	if o.Success {
		return 0
	}
	return 1
}

// printFailure reports err, for input that never reached the SDK: on
// stderr, and as the output line (failureOutput) on stdout. It returns the
// exit code, 1.
func printFailure(stdout, stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "e2e-cli: %s\n", err)
	writeLine(stdout, failureOutput{Error: err.Error()})
	return 1
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// writeLine prints v as one JSON line. HTML characters stay as they are, so
// a server's text reads the same as on the wire.
func writeLine(w io.Writer, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		_ = enc.Encode(failureOutput{Error: "encoding the output: " + err.Error()})
	}
	_, _ = w.Write(buf.Bytes())
}
