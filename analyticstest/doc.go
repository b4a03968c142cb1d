// Package analyticstest helps test code that sends events with package
// analytics.
//
// It has two tools, for two kinds of test:
//
//   - Fake is an in-memory analytics.Tracker. Application code that takes
//     an analytics.Tracker instead of a *analytics.Client can be tested
//     without a network: a test passes NewFake() where production passes
//     the client from analytics.New, then inspects what was tracked. The
//     fake validates messages, stamps messageId and timestamp, can be told
//     to reject events (FailEnqueueWith) or to report every event as not
//     delivered (WithDeliveryError), and honours Close like the real client.
//
//   - Server is a recording tracking endpoint on the loopback interface.
//     Point the real client at it with analytics.WithEndpoint(srv.URL()) to
//     test the whole path: configuration, batching, headers, gzip and
//     callbacks. NewServer ties it to a test; StartServer is for programs
//     and examples.
//
// Everything here is safe for concurrent use.
package analyticstest
