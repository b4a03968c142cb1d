package analytics

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/relaykit/analytics-go/internal/shared"
)

// Seams for the segment v3 compatibility package (segmentv3). They are
// reached through internal/shared, so they are not part of this package's
// API; see shared.Compat for what each one does.

func init() {
	shared.CompatOption = func(c shared.Compat) any {
		return optionFunc(func(s *settings) {
			if len(c.BodyFields) > 0 && !validBodyFields(c.BodyFields) {
				s.errs = append(s.errs, invalid("BodyFields", len(c.BodyFields), "must be at most shared.MaxBodyFields bytes of JSON object members"))
			}
			s.compat = c
		})
	}
	shared.MaxBodyFields = maxBodyFields
	shared.CheckEndpoint = func(endpoint string) error {
		return checkEndpoint(strings.TrimSuffix(endpoint, "/"))
	}
}

// maxBodyFields is the most shared.Compat BodyFields may take of a batch:
// the rest still holds one event of MaxEventBytes.
const maxBodyFields = batchEventBytes - MaxEventBytes

// validBodyFields reports whether members are JSON object members that
// take none of the body's own keys, within maxBodyFields.
func validBodyFields(members []byte) bool {
	if len(members) > maxBodyFields {
		return false
	}
	obj := append(append([]byte{'{'}, members...), '}')
	var m map[string]json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(members), []byte{','}) || json.Unmarshal(obj, &m) != nil {
		return false
	}
	_, batch := m["batch"]
	_, sentAt := m["sentAt"]
	_, key := m["writeKey"]
	return !batch && !sentAt && !key
}
