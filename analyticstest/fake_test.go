package analyticstest_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestFakeStampsLikeTheClient(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := analyticstest.NewFake(analyticstest.WithClock(func() time.Time { return now }))

	if err := f.Track(analytics.Track{UserID: "u", Event: "E"}); err != nil {
		t.Fatal(err)
	}
	own := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := f.Track(analytics.Track{MessageID: "mine", UserID: "u", Event: "E", Timestamp: own}); err != nil {
		t.Fatal(err)
	}
	got := f.Tracks()
	if len(got) != 2 {
		t.Fatalf("Tracks() has %d events, want 2", len(got))
	}
	if !uuidV4.MatchString(got[0].MessageID) {
		t.Errorf("generated MessageID %q is not a version 4 UUID", got[0].MessageID)
	}
	if !got[0].Timestamp.Equal(now) {
		t.Errorf("stamped Timestamp %v, want %v", got[0].Timestamp, now)
	}
	if got[1].MessageID != "mine" || !got[1].Timestamp.Equal(own) {
		t.Errorf("caller's MessageID/Timestamp overwritten: %q %v", got[1].MessageID, got[1].Timestamp)
	}
}

func TestFakeMessageIDsAreUnique(t *testing.T) {
	f := analyticstest.NewFake()
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		if err := f.Identify(analytics.Identify{UserID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range f.Messages() {
		if seen[m.ID()] {
			t.Fatalf("messageId %s generated twice", m.ID())
		}
		seen[m.ID()] = true
	}
}

func TestFakeValidatesLikeTheClient(t *testing.T) {
	f := analyticstest.NewFake()
	invalid := []struct {
		name string
		call func() error
	}{
		{"track without event", func() error { return f.Track(analytics.Track{UserID: "u"}) }},
		{"track without identity", func() error { return f.Track(analytics.Track{Event: "E"}) }},
		{"identify without identity", func() error { return f.Identify(analytics.Identify{}) }},
		{"group without group id", func() error { return f.Group(analytics.Group{UserID: "u"}) }},
		{"page without identity", func() error { return f.Page(analytics.Page{Name: "Home"}) }},
		{"screen without identity", func() error { return f.Screen(analytics.Screen{Name: "Home"}) }},
		{"alias without previous id", func() error { return f.Alias(analytics.Alias{UserID: "u"}) }},
		{"nil message", func() error { return f.Enqueue(nil) }},
		{"nil pointer", func() error { return f.Enqueue((*analytics.Track)(nil)) }},
		{"invalid pointer", func() error { return f.Enqueue(&analytics.Track{UserID: "u"}) }},
		{"invalid in blocking mode", func() error { return f.EnqueueContext(context.Background(), analytics.Page{}) }},
	}
	for _, tc := range invalid {
		err := tc.call()
		var me *analytics.MessageError
		if !errors.Is(err, analytics.ErrInvalidMessage) || !errors.As(err, &me) {
			t.Errorf("%s: err = %v, want a *MessageError matching ErrInvalidMessage", tc.name, err)
		}
	}
	if n := len(f.Messages()); n != 0 {
		t.Errorf("%d rejected messages were recorded", n)
	}
}

func TestFakeRecordsEveryTypeInOrder(t *testing.T) {
	f := analyticstest.NewFake()
	calls := []func() error{
		func() error { return f.Track(analytics.Track{UserID: "u", Event: "E"}) },
		func() error { return f.Identify(analytics.Identify{UserID: "u"}) },
		func() error { return f.Group(analytics.Group{UserID: "u", GroupID: "g"}) },
		func() error { return f.Page(analytics.Page{UserID: "u", Name: "Home"}) },
		func() error { return f.Screen(analytics.Screen{AnonymousID: "a", Name: "Main"}) },
		func() error { return f.Alias(analytics.Alias{UserID: "u", PreviousID: "a"}) },
		func() error { return f.Enqueue(&analytics.Track{UserID: "u", Event: "Pointer"}) },
		func() error {
			return f.EnqueueContext(context.Background(), analytics.Track{UserID: "u", Event: "Blocking"})
		},
		//lint:ignore SA1012 a nil context is documented to mean context.Background()
		func() error { return f.EnqueueContext(nil, analytics.Page{UserID: "u"}) },
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	var types []string
	for _, m := range f.Messages() {
		types = append(types, m.Type())
	}
	want := "[track identify group page screen alias track track page]"
	if got := fmt.Sprint(types); got != want {
		t.Errorf("types %s, want %s", got, want)
	}
	if n := len(f.Tracks()); n != 3 {
		t.Errorf("Tracks() = %d, want 3", n)
	}
	if tr := f.Tracks(); tr[1].Event != "Pointer" || tr[2].Event != "Blocking" {
		t.Errorf("Tracks() events %q %q", tr[1].Event, tr[2].Event)
	}
	counts := []int{len(f.Identifies()), len(f.Groups()), len(f.Pages()), len(f.Screens()), len(f.Aliases())}
	if fmt.Sprint(counts) != "[1 1 2 1 1]" {
		t.Errorf("per-type counts %v, want [1 1 2 1 1]", counts)
	}
	for _, m := range f.Messages() {
		if m.ID() == "" {
			t.Errorf("%s recorded without a messageId", m.Type())
		}
	}
}

func TestFakeMessagesIsACopy(t *testing.T) {
	f := analyticstest.NewFake()
	_ = f.Identify(analytics.Identify{UserID: "u"})
	msgs := f.Messages()
	msgs[0] = nil
	if f.Messages()[0] == nil {
		t.Error("changing the slice Messages returned changed the fake")
	}
}

func TestFakeFailEnqueueWith(t *testing.T) {
	f := analyticstest.NewFake()
	f.FailEnqueueWith(analytics.ErrQueueFull)
	if err := f.Track(analytics.Track{UserID: "u", Event: "E"}); !errors.Is(err, analytics.ErrQueueFull) {
		t.Fatalf("Track = %v, want ErrQueueFull", err)
	}
	// The injected error comes before validation: a test of the queue-full
	// path cannot pass because its event happened to be invalid.
	if err := f.Track(analytics.Track{UserID: "u"}); !errors.Is(err, analytics.ErrQueueFull) || errors.Is(err, analytics.ErrInvalidMessage) {
		t.Fatalf("invalid Track = %v, want ErrQueueFull", err)
	}
	tooLarge := fmt.Errorf("%w: simulated", analytics.ErrEventTooLarge)
	f.FailEnqueueWith(tooLarge)
	if err := f.EnqueueContext(context.Background(), analytics.Identify{UserID: "u"}); !errors.Is(err, analytics.ErrEventTooLarge) {
		t.Fatalf("EnqueueContext = %v, want the injected error at once", err)
	}
	f.FailEnqueueWith(nil)
	if err := f.Track(analytics.Track{UserID: "u", Event: "E"}); err != nil {
		t.Fatalf("after FailEnqueueWith(nil): %v", err)
	}
	if n := len(f.Messages()); n != 1 {
		t.Errorf("%d messages recorded, want only the one accepted", n)
	}
}

func TestFakeEnqueueContextWaitsForRoom(t *testing.T) {
	f := analyticstest.NewFake()
	f.FailEnqueueWith(analytics.ErrQueueFull)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := f.EnqueueContext(ctx, analytics.Track{UserID: "u", Event: "E"})
	if !errors.Is(err, analytics.ErrQueueFull) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("EnqueueContext = %v, want ErrQueueFull and DeadlineExceeded", err)
	}

	done := make(chan error, 1)
	go func() { done <- f.EnqueueContext(context.Background(), analytics.Track{UserID: "u", Event: "E"}) }()
	select {
	case err := <-done:
		t.Fatalf("EnqueueContext returned %v while the queue was full", err)
	case <-time.After(20 * time.Millisecond):
	}
	f.FailEnqueueWith(nil) // room again
	if err := <-done; err != nil {
		t.Fatalf("EnqueueContext after room: %v", err)
	}
	if n := len(f.Tracks()); n != 1 {
		t.Errorf("%d tracks recorded, want 1", n)
	}
}

func TestFakeEnqueueContextEndsAtClose(t *testing.T) {
	f := analyticstest.NewFake()
	f.FailEnqueueWith(analytics.ErrQueueFull)
	done := make(chan error, 1)
	go func() { done <- f.EnqueueContext(context.Background(), analytics.Track{UserID: "u", Event: "E"}) }()
	time.Sleep(10 * time.Millisecond)
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, analytics.ErrClosed) {
		t.Fatalf("EnqueueContext = %v, want ErrClosed", err)
	}
}

func TestFakeClose(t *testing.T) {
	var delivered [][]analytics.Message
	f := analyticstest.NewFake(analyticstest.WithOnSuccess(func(events []analytics.Message) {
		delivered = append(delivered, events)
	}))
	_ = f.Track(analytics.Track{UserID: "u", Event: "E"})
	if err := f.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if !f.Closed() {
		t.Error("Closed() = false after Close")
	}
	if len(delivered) != 1 || len(delivered[0]) != 1 {
		t.Errorf("Close delivered %v, want one call with the pending event", delivered)
	}
	for name, err := range map[string]error{
		"Track":          f.Track(analytics.Track{UserID: "u", Event: "E"}),
		"Enqueue":        f.Enqueue(analytics.Page{UserID: "u"}),
		"EnqueueContext": f.EnqueueContext(context.Background(), analytics.Page{UserID: "u"}),
		"Flush":          f.Flush(context.Background()),
		"second Close":   f.Close(context.Background()),
	} {
		if !errors.Is(err, analytics.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if err := f.Track(analytics.Track{Event: "E"}); !errors.Is(err, analytics.ErrClosed) || errors.Is(err, analytics.ErrInvalidMessage) {
		t.Errorf("invalid Track after Close = %v, want ErrClosed, as the client answers", err)
	}
	if n := len(f.Messages()); n != 1 {
		t.Errorf("%d messages, want 1", n)
	}
}

func TestFakeFlushCallsOnSuccessOncePerFlush(t *testing.T) {
	var calls []int
	f := analyticstest.NewFake(
		analyticstest.WithOnSuccess(func(events []analytics.Message) { calls = append(calls, len(events)) }),
		analyticstest.WithOnError(func(error, []analytics.Message) { t.Error("OnError called without a delivery error") }),
	)
	ctx := context.Background()
	_ = f.Track(analytics.Track{UserID: "u", Event: "A"})
	_ = f.Track(analytics.Track{UserID: "u", Event: "B"})
	if f.Pending() != 2 {
		t.Errorf("Pending() = %d, want 2", f.Pending())
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil { // nothing pending: no call
		t.Fatal(err)
	}
	_ = f.Identify(analytics.Identify{UserID: "u"})
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(calls) != "[2 1]" {
		t.Errorf("OnSuccess batch sizes %v, want [2 1]", calls)
	}
	if f.Pending() != 0 {
		t.Errorf("Pending() = %d after Close", f.Pending())
	}
}

func TestFakeDeliveryError(t *testing.T) {
	reason := &analytics.DeliveryError{
		Reason:   analytics.ErrRetriesExhausted,
		Last:     &analytics.HTTPError{StatusCode: 503, Kind: analytics.KindRetryable},
		Attempts: 11,
	}
	var failed []analytics.Message
	var gotErr error
	f := analyticstest.NewFake(
		analyticstest.WithDeliveryError(reason),
		analyticstest.WithOnSuccess(func([]analytics.Message) { t.Error("OnSuccess called with a delivery error") }),
		analyticstest.WithOnError(func(err error, events []analytics.Message) {
			gotErr = err
			failed = append(failed, events...)
		}),
	)
	_ = f.Track(analytics.Track{UserID: "u", Event: "E"})
	if err := f.Flush(context.Background()); err != nil {
		t.Fatalf("Flush = %v, want nil (failures go to OnError)", err)
	}
	_ = f.Page(analytics.Page{UserID: "u"})
	if err := f.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v, want nil (failures go to OnError)", err)
	}
	var he *analytics.HTTPError
	if !errors.Is(gotErr, analytics.ErrRetriesExhausted) || !errors.As(gotErr, &he) || he.StatusCode != 503 {
		t.Errorf("OnError err = %v", gotErr)
	}
	if len(failed) != 2 {
		t.Errorf("%d events failed, want 2", len(failed))
	}
}

func TestFakeHandBack(t *testing.T) {
	var handedBack int
	f := analyticstest.NewFake(
		analyticstest.WithDeliveryError(analytics.ErrShutdownInterrupted),
		analyticstest.WithOnError(func(err error, events []analytics.Message) {
			if !errors.Is(err, analytics.ErrShutdownInterrupted) {
				t.Errorf("OnError err = %v", err)
			}
			handedBack += len(events)
		}),
	)
	_ = f.Track(analytics.Track{UserID: "u", Event: "E"})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush = %v, want DeadlineExceeded: hand-backs happen only at Close", err)
	}

	flushed := make(chan error, 1)
	go func() { flushed <- f.Flush(context.Background()) }()
	time.Sleep(10 * time.Millisecond)
	_ = f.Identify(analytics.Identify{UserID: "u"})
	err := f.Close(context.Background())
	if !errors.Is(err, analytics.ErrShutdownInterrupted) {
		t.Fatalf("Close = %v, want ErrShutdownInterrupted", err)
	}
	if err := <-flushed; err != nil {
		t.Errorf("waiting Flush = %v, want nil once Close gave every event its disposition", err)
	}
	if handedBack != 2 {
		t.Errorf("%d events handed back, want 2", handedBack)
	}
}

func TestFakeHandBackWithNothingPending(t *testing.T) {
	f := analyticstest.NewFake(analyticstest.WithDeliveryError(analytics.ErrShutdownInterrupted))
	if err := f.Flush(context.Background()); err != nil {
		t.Errorf("Flush with nothing pending = %v", err)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Errorf("Close with nothing pending = %v, want nil", err)
	}
}

func TestFakeReset(t *testing.T) {
	calls := 0
	f := analyticstest.NewFake(analyticstest.WithOnSuccess(func([]analytics.Message) { calls++ }))
	_ = f.Track(analytics.Track{UserID: "u", Event: "E"})
	f.FailEnqueueWith(analytics.ErrQueueFull)
	_ = f.Close(context.Background())
	f.Reset()
	if f.Closed() || len(f.Messages()) != 0 || f.Pending() != 0 {
		t.Fatalf("after Reset: closed=%t messages=%d pending=%d", f.Closed(), len(f.Messages()), f.Pending())
	}
	if err := f.Track(analytics.Track{UserID: "u", Event: "E"}); err != nil {
		t.Fatalf("Track after Reset = %v", err)
	}
	_ = f.Flush(context.Background())
	if calls != 2 {
		t.Errorf("OnSuccess calls = %d, want 2 (options survive Reset)", calls)
	}
}

func TestFakeMessageIDsOption(t *testing.T) {
	n := 0
	f := analyticstest.NewFake(analyticstest.WithMessageIDs(func() string { n++; return fmt.Sprintf("id-%d", n) }))
	_ = f.Track(analytics.Track{UserID: "u", Event: "E"})
	_ = f.Track(analytics.Track{UserID: "u", Event: "E", MessageID: "own"})
	_ = f.Alias(analytics.Alias{UserID: "u", PreviousID: "p"})
	var ids []string
	for _, m := range f.Messages() {
		ids = append(ids, m.ID())
	}
	if fmt.Sprint(ids) != "[id-1 own id-2]" {
		t.Errorf("ids %v", ids)
	}
}

// TestFakeConcurrentSafe runs producers, flushes and readers at once; every
// accepted event must appear in exactly one callback. Run it with -race.
func TestFakeConcurrentSafe(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	f := analyticstest.NewFake(analyticstest.WithOnSuccess(func(events []analytics.Message) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range events {
			seen[m.ID()]++
		}
	}))
	const producers, perProducer = 8, 200
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				if err := f.Track(analytics.Track{UserID: "u", Event: "E"}); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					_ = f.Flush(context.Background())
					_ = f.Tracks()
					_ = f.Pending()
				}
			}
		}()
	}
	wg.Wait()
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(seen) != producers*perProducer {
		t.Fatalf("%d distinct events in callbacks, want %d", len(seen), producers*perProducer)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("event %s appeared in %d callbacks", id, n)
		}
	}
}
