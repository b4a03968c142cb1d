// Package analytics (import path github.com/relaykit/analytics-go/segmentv3)
// is a drop-in replacement for segment's Go library v3, under both of its
// import paths: gopkg.in/segmentio/analytics-go.v3 (v3.1.0) and
// github.com/segmentio/analytics-go/v3 (v3.3.0). It delivers through this
// module's engine, github.com/relaykit/analytics-go.
//
// A v3 program moves by changing its import line only:
//
//	import "gopkg.in/segmentio/analytics-go.v3"
//	import "github.com/segmentio/analytics-go/v3"
//
// both become
//
//	import "github.com/relaykit/analytics-go/segmentv3"
//
// The package name stays analytics, and every exported identifier of v3
// v3.1.0 and v3.3.0 exists here with the same type and meaning
// (Product.SKU is sent as "sku", where v3 sent "sky"). Requests have v3's
// shape: the events are encoded as v3 encodes them (the same field names,
// the same omitted empty fields, no context unless the message has one),
// and the library and Config.DefaultContext are in the body's top-level
// context, once per request. The few deliberate differences are listed in
// docs/migrating-from-segment-v3.md of this module, with the results of
// v3's own test suites run against this package.
//
// # What changes under the same API
//
// Delivery is the engine's: only a 2xx response counts as delivered,
// 4xx responses other than 408, 410, 429 and 460 are not retried, and a
// Retry-After is honoured and does not use up retries. Counted retries
// wait Config.RetryAfter when it is set, and v3's own backoff otherwise
// (100 ms doubling up to 10 s), so a program that waits on its callbacks
// while offline waits as long as with v3. NewWithConfig accepts every
// configuration v3 accepted; a value that is wrong is logged once. Client.Enqueue keeps v3's blocking behaviour: when the queue
// is full it waits for room. Client.Close behaves as v3's: it sends what is
// queued, waits for no retry, and reports every message not delivered to
// Callback.Failure at once (Config.DrainOnClose retries instead); it
// returns no later than Config.CloseTimeout plus half a second. The
// default logger is silent, unless Config.Verbose is set.
//
// # Moving on
//
// The engine's own API (package github.com/relaykit/analytics-go) adds a
// non-blocking Track, Flush, Close with a context and typed errors. The
// migration guide maps each construct of this package to it; both can be
// used side by side while a program moves.
package analytics
