// Package analytics (import path github.com/relaykit/analytics-go/segmentv3)
// is a drop-in replacement for gopkg.in/segmentio/analytics-go.v3 (v3.1.0)
// that delivers through this module's engine, github.com/relaykit/analytics-go.
//
// A v3 program moves by changing its import line only:
//
//	import "gopkg.in/segmentio/analytics-go.v3"
//
// becomes
//
//	import "github.com/relaykit/analytics-go/segmentv3"
//
// The package name stays analytics, and every exported identifier of v3
// v3.1.0 exists here with the same type and meaning (Product.SKU is sent
// as "sku", where v3 sent "sky"). The messages are
// encoded as v3 encodes them (the same field names, the same omitted empty
// fields, the same Context, Properties, Traits and Integrations JSON); the
// few deliberate differences are listed in docs/migrating-from-segment-v3.md
// of this module.
//
// # What changes under the same API
//
// Delivery is the engine's: only a 2xx response counts as delivered,
// 4xx responses other than 408, 410, 429 and 460 are not retried, a
// Retry-After is honoured and does not use up retries, and retries follow
// the engine's backoff and budgets (Config.RetryAfter is not used).
// Client.Enqueue keeps v3's blocking behaviour: when the queue is full
// it waits for room. Client.Close delivers what is queued within
// Config.CloseTimeout (DefaultCloseTimeout when zero) and returns no later
// than that plus half a second; events it could not deliver in time are
// reported to Callback.Failure. The default logger is silent.
//
// # Moving on
//
// The engine's own API (package github.com/relaykit/analytics-go) adds a
// non-blocking Track, Flush, Close with a context and typed errors. The
// migration guide maps each construct of this package to it; both can be
// used side by side while a program moves.
package analytics
