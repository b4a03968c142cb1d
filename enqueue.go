package analytics

import (
	"fmt"
	"time"

	"github.com/relaykit/analytics-go/internal/shared"
)

// prepareDetached is the enqueue path of a client up to the queue, without
// a client: prepareMessage with callbacks registered, then the size check of
// accept. It backs analyticstest's Fake (see package internal/shared).
func prepareDetached(m Message, now func() time.Time, newID func() string) (Message, error) {
	sc := detachedScratch(now, newID)
	kept, err := prepareMessage(sc, m, true)
	if err == nil {
		err = checkSize(sc.Enc.Bytes())
	}
	if err != nil {
		return nil, err
	}
	return kept, nil
}

// MaxEventBytes is the largest accepted event, as encoded JSON (R45).
const MaxEventBytes = 32 * 1024

// checkSize rejects an event whose JSON is larger than MaxEventBytes (R45).
func checkSize(json []byte) error {
	if len(json) > MaxEventBytes {
		return fmt.Errorf("%w: %d bytes of JSON, limit %d", ErrEventTooLarge, len(json), MaxEventBytes)
	}
	return nil
}

// The enqueue path without a client, for analyticstest's Fake (reached
// through internal/shared, so not part of this package's API).
func init() {
	shared.Prepare = func(m any, now func() time.Time, newID func() string) (any, error) {
		msg, _ := m.(Message) // nil or not a Message: rejected as unknown below
		return prepareDetached(msg, now, newID)
	}
	shared.Decode = func(raw []byte) (any, error) { return decodeMessage(raw) }
}
