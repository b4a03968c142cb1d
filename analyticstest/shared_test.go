package analyticstest_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

// holdTransport keeps every request until its context ends, so a client
// under test accepts events and sends nothing.
type holdTransport struct{}

func (holdTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// The fake rejects exactly what the client rejects, with the same error
// text and the same sentinel: both run the client's preparation code.
func TestFakeRejectsLikeTheClient(t *testing.T) {
	client, err := analytics.New("wk", analytics.WithEndpoint("http://127.0.0.1:1"),
		analytics.WithHTTPClient(&http.Client{Transport: holdTransport{}}), analytics.WithConsumers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_ = client.Close(ctx)
	}()
	fake := analyticstest.NewFake()
	deep := map[string]any{}
	for i, m := 0, deep; i < 100; i++ {
		next := map[string]any{}
		m["x"] = next
		m = next
	}
	cases := []struct {
		name string
		msg  analytics.Message
		want error
	}{
		{"track without event", analytics.Track{UserID: "u"}, analytics.ErrInvalidMessage},
		{"alias without user", &analytics.Alias{PreviousID: "p"}, analytics.ErrInvalidMessage},
		{"group without group id", analytics.Group{AnonymousID: "a"}, analytics.ErrInvalidMessage},
		{"nil", nil, analytics.ErrInvalidMessage},
		{"typed nil pointer", (*analytics.Screen)(nil), analytics.ErrInvalidMessage},
		{"property that is not JSON", analytics.Track{UserID: "u", Event: "E", Properties: analytics.Properties{"f": func() {}}}, analytics.ErrInvalidMessage},
		{"NaN trait", analytics.Identify{UserID: "u", Traits: analytics.Traits{"score": math.NaN()}}, analytics.ErrInvalidMessage},
		{"nesting too deep", analytics.Page{UserID: "u", Context: analytics.ContextFields{"deep": deep}}, analytics.ErrInvalidMessage},
		// With its own id and time, so that both encode the same bytes (the
		// size is in the error text).
		{"too large", analytics.Track{MessageID: "m", Timestamp: time.Unix(1, 0), UserID: "u", Event: "E", Properties: analytics.Properties{"blob": strings.Repeat("x", analytics.MaxEventBytes)}}, analytics.ErrEventTooLarge},
	}
	for _, tc := range cases {
		cerr, ferr := client.Enqueue(tc.msg), fake.Enqueue(tc.msg)
		if !errors.Is(cerr, tc.want) {
			t.Fatalf("%s: the client answered %v, want %v", tc.name, cerr, tc.want)
		}
		if ferr == nil || ferr.Error() != cerr.Error() || !errors.Is(ferr, tc.want) {
			t.Errorf("%s: fake answered %v, client %v", tc.name, ferr, cerr)
		}
	}
	if n := len(fake.Messages()); n != 0 {
		t.Errorf("the fake recorded %d rejected messages", n)
	}
}

// The fake stamps as the client does: UTC, whatever the clock's zone, and
// the client's id format.
func TestFakeStampsUTC(t *testing.T) {
	f := analyticstest.NewFake()
	if err := f.Track(analytics.Track{UserID: "u", Event: "E"}); err != nil {
		t.Fatal(err)
	}
	got := f.Tracks()[0]
	if got.Timestamp.Location() != time.UTC {
		t.Errorf("default stamp %v is in %v, want UTC", got.Timestamp, got.Timestamp.Location())
	}
	if since := time.Since(got.Timestamp); since < 0 || since > time.Minute {
		t.Errorf("default stamp %v is not now", got.Timestamp)
	}

	paris := time.FixedZone("CET", 3600)
	at := time.Date(2026, 11, 30, 13, 0, 0, 0, paris)
	f = analyticstest.NewFake(analyticstest.WithClock(func() time.Time { return at }))
	own := time.Date(2026, 1, 2, 3, 4, 5, 0, paris)
	_ = f.Page(analytics.Page{UserID: "u"})
	_ = f.Page(analytics.Page{UserID: "u", Timestamp: own})
	pages := f.Pages()
	if ts := pages[0].Timestamp; ts.Location() != time.UTC || !ts.Equal(at) {
		t.Errorf("WithClock stamp %v, want %v in UTC", ts, at.UTC())
	}
	// The caller's own time keeps its instant; the copy is in UTC, as the
	// client's callbacks get it.
	if ts := pages[1].Timestamp; ts.Location() != time.UTC || !ts.Equal(own) {
		t.Errorf("caller's Timestamp recorded as %v, want %v in UTC", ts, own.UTC())
	}
}

// What the fake records is a copy, as the client's callbacks get: later
// changes to the caller's map do not show.
func TestFakeRecordsACopy(t *testing.T) {
	f := analyticstest.NewFake()
	props := analytics.Properties{"plan": "pro"}
	_ = f.Track(analytics.Track{UserID: "u", Event: "E", Properties: props})
	props["plan"] = "changed"
	if got := f.Tracks()[0].Properties["plan"]; got != "pro" {
		t.Errorf("recorded plan %v, want pro", got)
	}
}
