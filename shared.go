package analytics

import (
	"fmt"
	"time"
)

// prepareDetached is the enqueue path of a client up to the queue, without
// a client: prepareMessage with callbacks registered, then the size check of
// accept. It backs analyticstest's Fake (see package internal/shared).
func prepareDetached(m Message, now func() time.Time, newID func() string) (Message, error) {
	sc := &scratch{next: idsPerBlock, clock: now, newID: newID}
	kept, err := prepareMessage(sc, m, true)
	if err == nil {
		err = checkSize(sc.enc.buf)
	}
	if err != nil {
		return nil, err
	}
	return kept, nil
}

// checkSize rejects an event whose JSON is larger than MaxEventBytes (R45).
func checkSize(json []byte) error {
	if len(json) > MaxEventBytes {
		return fmt.Errorf("%w: %d bytes of JSON, limit %d", ErrEventTooLarge, len(json), MaxEventBytes)
	}
	return nil
}
