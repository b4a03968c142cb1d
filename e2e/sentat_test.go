package e2e

import (
	"fmt"
	"testing"
)

// R4, R59: with config.eventSentAt every event of every attempt carries the
// body's sentAt of that attempt, gzip or not; without it no event has one.
func TestEventSentAtOnTheWire(t *testing.T) {
	t.Parallel()
	for _, gz := range []bool{false, true} {
		for _, on := range []bool{false, true} {
			t.Run(fmt.Sprintf("gzip=%t/eventSentAt=%t", gz, on), func(t *testing.T) {
				t.Parallel()
				retry(t, func(t testing.TB) {
					id := ids(fmt.Sprintf("sentat-%t-%t", gz, on), 3)
					r := runScenario(t, scenario{
						in:      input{Sequences: one(tracks(id...)...), Config: cfg("flushAt", 3, "gzip", gz, "eventSentAt", on)},
						respond: script(status(500), ok200),
					})
					expectCount(t, r.reqs, 2)
					expectAll(t, r, outDelivered)
					if len(r.reqs) == 2 && r.reqs[0].SentAt == r.reqs[1].SentAt {
						t.Errorf("both attempts have sentAt %q; it is set per attempt (R4)", r.reqs[0].SentAt)
					}
					for _, q := range r.reqs {
						if gz != (q.Header.Get("Content-Encoding") == "gzip") {
							t.Errorf("request #%d: Content-Encoding %q with gzip %t", q.Index, q.Header.Get("Content-Encoding"), gz)
						}
						for i, ev := range q.Events {
							got, has := ev["sentAt"]
							switch {
							case on && got != q.SentAt:
								t.Errorf("request #%d event %d: sentAt %v, want the body's %q", q.Index, i, got, q.SentAt)
							case !on && has:
								t.Errorf("request #%d event %d: sentAt %v without the option", q.Index, i, got)
							}
						}
					}
				})
			})
		}
	}
}
