package analyticstest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

// signUp is application code. It takes an analytics.Tracker rather than a
// *analytics.Client, so a test can pass a Fake.
func signUp(tracker analytics.Tracker, userID, plan string) error {
	if err := tracker.Identify(analytics.Identify{UserID: userID, Traits: analytics.Traits{"plan": plan}}); err != nil {
		return fmt.Errorf("identify: %w", err)
	}
	err := tracker.Track(analytics.Track{UserID: userID, Event: "Signed Up", Properties: analytics.Properties{"plan": plan}})
	if errors.Is(err, analytics.ErrQueueFull) {
		return nil // analytics must never fail a sign-up
	}
	return err
}

// In production signUp gets the client from analytics.New; in a test one
// line replaces it with a Fake, and the test inspects what was tracked.
func ExampleFake() {
	// production: tracker, err := analytics.New(writeKey, analytics.WithOnError(...))
	tracker := analyticstest.NewFake()

	if err := signUp(tracker, "user-42", "pro"); err != nil {
		fmt.Println("signUp:", err)
	}
	for _, m := range tracker.Messages() {
		fmt.Println(m.Type())
	}
	for _, tr := range tracker.Tracks() {
		fmt.Println(tr.Event, tr.UserID, tr.Properties["plan"], tr.MessageID != "")
	}
	// Output:
	// identify
	// track
	// Signed Up user-42 pro true
}

// FailEnqueueWith tests how code copes with a full queue.
func ExampleFake_FailEnqueueWith() {
	tracker := analyticstest.NewFake()
	tracker.FailEnqueueWith(analytics.ErrQueueFull)

	fmt.Println("signUp:", signUp(tracker, "user-42", "free"))
	fmt.Println("tracked:", len(tracker.Tracks()))
	// Output:
	// signUp: identify: analytics: queue full
	// tracked: 0
}

// Fixed clock and message ids make recorded messages fully predictable.
func ExampleWithMessageIDs() {
	n := 0
	tracker := analyticstest.NewFake(
		analyticstest.WithMessageIDs(func() string { n++; return fmt.Sprintf("msg-%d", n) }),
		analyticstest.WithClock(func() time.Time { return time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC) }),
	)
	_ = tracker.Page(analytics.Page{UserID: "user-42", Name: "Pricing"})
	_ = tracker.Screen(analytics.Screen{UserID: "user-42", Name: "Settings"})
	for _, m := range tracker.Messages() {
		fmt.Println(m.Type(), m.ID())
	}
	fmt.Println(tracker.Pages()[0].Timestamp.Format(time.RFC3339))
	// Output:
	// page msg-1
	// screen msg-2
	// 2026-11-30T09:00:00Z
}

// WithDeliveryError tests an application's OnError handling: every event
// is reported as not delivered when the fake is flushed or closed.
func ExampleWithDeliveryError() {
	failure := &analytics.DeliveryError{
		Reason: analytics.ErrRetriesExhausted,
		Last:   &analytics.HTTPError{StatusCode: 503, Kind: analytics.KindRetryable},
	}
	tracker := analyticstest.NewFake(
		analyticstest.WithDeliveryError(failure),
		analyticstest.WithOnError(func(err error, events []analytics.Message) {
			var he *analytics.HTTPError
			if errors.As(err, &he) {
				fmt.Printf("%d event(s) not delivered: status %d, retries exhausted: %t\n",
					len(events), he.StatusCode, errors.Is(err, analytics.ErrRetriesExhausted))
			}
		}),
	)
	_ = signUp(tracker, "user-42", "pro")
	fmt.Println("Close:", tracker.Close(context.Background()))
	fmt.Println("Track after Close:", tracker.Track(analytics.Track{UserID: "user-42", Event: "Late"}))
	// Output:
	// 2 event(s) not delivered: status 503, retries exhausted: true
	// Close: <nil>
	// Track after Close: analytics: client closed
}

// StartServer runs a recording endpoint for the real client. In a test,
// analyticstest.NewServer(t) does the same and closes it when the test ends.
func ExampleStartServer() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	client, err := analytics.New("WRITE_KEY", analytics.WithEndpoint(srv.URL()), analytics.WithGzip(true))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = signUp(client, "user-42", "pro")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Close(ctx); err != nil {
		fmt.Println("Close:", err)
	}

	for _, r := range srv.Requests() {
		fmt.Println(r.Method, r.Path, r.Status, "gzip:", r.Gzip, "write key:", r.WriteKey, "events:", len(r.Events))
	}
	for _, m := range srv.Messages() {
		fmt.Println(m.Type(), m.ID() != "")
	}
	for _, tr := range srv.Tracks() {
		fmt.Println(tr.Event, tr.UserID, tr.Properties["plan"], tr.Timestamp.Location())
	}
	// Output:
	// POST /v1/batch 200 gzip: true write key: WRITE_KEY events: 2
	// identify true
	// track true
	// Signed Up user-42 pro UTC
}

// The Server plays an endpoint's faults, so a test can check what an
// application does during an outage: here a 429 with Retry-After, which
// the client waits out before it sends the same batch again. FailFor
// fails for a while instead, Down and Up refuse connections and accept
// them again, and SetBodyLimit answers 413 to large bodies.
func ExampleServer_FailNext() {
	srv, err := analyticstest.StartServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	srv.FailNext(1, analyticstest.Fault{Status: http.StatusTooManyRequests, RetryAfter: time.Second})

	client, err := analytics.New("WRITE_KEY", analytics.WithEndpoint(srv.URL()))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Track(analytics.Track{MessageID: "order-1001", UserID: "user-42", Event: "Order Completed"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("close:", client.Close(ctx))
	for _, r := range srv.Requests() {
		fmt.Printf("%d X-Retry-Count=%q\n", r.Status, r.RetryCount())
	}
	fmt.Println("delivered:", srv.MessageIDs())
	// Output:
	// close: <nil>
	// 429 X-Retry-Count=""
	// 200 X-Retry-Count="1"
	// delivered: [order-1001]
}
