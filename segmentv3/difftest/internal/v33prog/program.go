// Package program is a program written for
// github.com/segmentio/analytics-go/v3 v3.3.0: it uses what v3.3.0 added
// to v3.1.0 (Context.Direct, Context.GroupID, ValidateFields and
// FieldGetter, and a Message interface with only Validate). The difftest
// builds a copy of it with only the import line changed to the
// compatibility package.
package program

import (
	"errors"
	"net/http"
	"time"

	analytics "github.com/segmentio/analytics-go/v3"
)

// event is a message held as a decoded JSON object.
type event map[string]interface{}

func (e event) GetField(field string) (interface{}, bool) {
	v, ok := e[field]
	return v, ok
}

// Validate makes event a Message, which v3.3.0 allows (the client still
// refuses to enqueue it).
func (e event) Validate() error { return analytics.ValidateFields(e) }

var _ analytics.FieldGetter = event{}
var _ analytics.Message = event{}

// Run validates raw events with ValidateFields, enqueues the valid ones as
// Track messages whose context uses Direct and GroupID, and closes the
// client. It returns the validation errors and the error of enqueueing an
// event as a custom type.
func Run(endpoint string, transport http.RoundTripper) (invalid []error, custom error, closeErr error) {
	client, err := analytics.NewWithConfig("write-key", analytics.Config{
		Endpoint:  endpoint,
		Transport: transport,
		Interval:  time.Hour,
	})
	if err != nil {
		panic(err)
	}
	raw := []event{
		{"type": "track", "userId": "u1", "event": "Signed Up"},
		{"type": "track", "userId": "u2"},
		{"type": "unknown"},
	}
	for _, e := range raw {
		if err := analytics.ValidateFields(e); err != nil {
			var fe analytics.FieldError
			if !errors.As(err, &fe) {
				panic(err)
			}
			invalid = append(invalid, err)
			continue
		}
		userID, _ := e["userId"].(string)
		name, _ := e["event"].(string)
		if err := client.Enqueue(analytics.Track{UserId: userID, Event: name,
			Context: &analytics.Context{Direct: true, GroupID: "team-7"}}); err != nil {
			panic(err)
		}
	}
	custom = client.Enqueue(raw[0])
	return invalid, custom, client.Close()
}
