// Package analytics sends events (track, identify, group, page, screen,
// alias) to a Segment-compatible tracking API, in batches, from a
// background pipeline that retries with backoff, honours Retry-After and
// gives every accepted event exactly one reported outcome.
//
//	client, err := analytics.New(os.Getenv("ANALYTICS_WRITE_KEY"),
//		analytics.WithOnError(func(err error, events []analytics.Message) {
//			log.Printf("%d event(s) not delivered: %v", len(events), err) // err starts with "analytics:"
//		}),
//	)
//	if err != nil {
//		log.Fatal(err)
//	}
//	err = client.Track(analytics.Track{
//		UserID:     "user-42",
//		Event:      "Order Completed",
//		Properties: analytics.Properties{"revenue": 39.95},
//	})
//	// …
//	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
//	defer cancel()
//	err = client.Close(ctx) // at shutdown: deliver what is queued, within 10 s
//
// # Concurrency
//
// A *Client is safe for concurrent use; create one per process and share
// it. The enqueue methods (Track, Identify, Group, Page, Screen, Alias,
// Enqueue) never block and do no I/O: they validate and encode the event,
// stamp its messageId and timestamp when empty, and queue it, or return an
// error (ErrQueueFull, ErrClosed, ErrEventTooLarge, a *MessageError) and
// forget it. EnqueueContext is the blocking variant for backfills. Uploads
// happen on the client's consumer goroutines, which also run the OnSuccess
// and OnError callbacks (see Client for the callback contract).
//
// # Delivery
//
// Delivery is at least once. Every event carries a messageId that the API
// uses to drop repeats, and a batch is re-sent with the same events and
// ids. Only a 2xx response counts as delivered. Retryable responses (408,
// 410, 429, 460 and 5xx except 501, 505 and 511) and transport errors are
// retried with exponential backoff that follows the server's health (0.5 s
// while other batches are delivered, doubling to 60 s only while nothing
// is, ±10 % jitter, MaxRetries 1000 by default); a usable Retry-After,
// capped at 300 s, pauses every consumer instead and does not count as a
// retry. Each accepted event ends in exactly one callback: OnSuccess
// (delivered), OnError with a failure, or OnError with
// ErrShutdownInterrupted when Close's deadline handed it back.
//
// With WithOAuth, uploads carry an OAuth 2.0 bearer token (client
// credentials, private-key JWT) instead of the write key's credentials, and
// a 511 is retried with a fresh token (R50).
//
// Flush waits for what was enqueued before it; Close drains the queue with
// the same policy and, when its context ends first, hands back what is
// left and returns within the deadline plus 0.5 s. A context without a
// deadline is bounded by CloseTimeout (30 s, WithCloseTimeout). Derive
// Close's context from context.Background(), not from the context that
// signalled shutdown: that one is already done.
//
// The complete delivery contract is docs/delivery.md in the module's
// repository. Doc comments cite its rules by id: (R43) is rule R43 there,
// S36 a scenario of its test plan, INV1 an invariant.
//
// # Logging and metrics
//
// The client is silent by default. WithLogger sends its logs to a zap
// logger, WithSlog to a log/slog logger; neither ever receives the write
// key or event payloads. Client.Stats returns the counters (accepted,
// rejected by reason, delivered, failed, handed back, retries, …);
// WithAttemptHook reports every HTTP attempt. The separate module
// github.com/relaykit/analytics-go/analyticsotel turns both into
// OpenTelemetry metrics.
//
// # Testing
//
// Application code that takes a Tracker instead of a *Client can be tested
// with analyticstest.Fake; analyticstest.Server is a recording endpoint for
// tests of the whole path.
package analytics
