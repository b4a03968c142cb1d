// Package analyticstest helps test code that sends events with package
// analytics.
//
// It has two tools, for two kinds of test:
//
//   - Fake is an in-memory analytics.Tracker. Application code that takes
//     an analytics.Tracker instead of a *analytics.Client can be tested
//     without a network: a test passes NewFake() where production passes
//     the client from analytics.New, then inspects what was tracked with
//     typed accessors (Tracks, Identifies, …). The fake runs the client's
//     own validation, encoding checks, id generator and UTC stamping, so
//     it accepts and rejects exactly what the client does, with the same
//     errors. It can be told to reject events (FailEnqueueWith) or to
//     report every event as not delivered (WithDeliveryError), and honours
//     Close like the real client.
//
//   - Server is a recording tracking endpoint on the loopback interface.
//     Point the real client at it with analytics.WithEndpoint(srv.URL()) to
//     test the whole path: configuration, batching, headers, gzip and
//     callbacks. It decodes what it receives into the message types of
//     package analytics (Tracks, Identifies, … and Messages) and keeps the
//     raw JSON too (RawEvents, Request.Body). It plays an endpoint's
//     faults: an error status with Retry-After for a number of requests
//     (FailNext) or for a while (FailFor), refused connections (Down, then
//     Up on the same address) and a body limit (SetBodyLimit). NewServer
//     ties it to a test; StartServer is for programs and examples.
//
// The options of this package are named so that they cannot be confused
// with the client's: WithOnSuccess and WithOnError configure a
// Fake the way analytics.WithOnSuccess and analytics.WithOnError configure
// a client.
//
// Everything here is safe for concurrent use.
package analyticstest
