package analytics

import (
	"fmt"

	"github.com/relaykit/analytics-go/internal/wire"
)

// WithDefaultContext sets context entries that every event carries (for
// example "app", "os" or "device"), merged into the event's Context when it
// is enqueued. The merge is by top-level key: a key the event's own Context
// has wins, whatever its value (nil included), and nested maps are not
// merged. A "library" entry here replaces the one the client adds. Default:
// none.
//
// The top level of ctx is copied when New runs; nested maps and slices are
// shared and must not be changed afterwards. The values must be encodable
// as JSON: New returns a *ConfigError (field "DefaultContext") otherwise.
// Callbacks receive the merged Context, as it was sent. A nil or empty map
// removes the defaults, and enqueue calls stay as cheap as without the
// option. With it, the entries are encoded once, by New, and each enqueue
// call copies their JSON into the event (no allocation unless OnSuccess is
// registered); a value with its own MarshalJSON is therefore called once.
func WithDefaultContext(fields map[string]any) Option {
	return optionFunc(func(s *settings) {
		if err := checkDefaults(fields); err != nil {
			s.errs = append(s.errs, invalid("DefaultContext", fmt.Sprintf("%d keys", len(fields)), err.Error()))
		}
		s.defaultContext = cloneMap(fields)
	})
}

// WithDefaultProperties sets properties that every Track, Page and Screen
// event carries, merged into the event's Properties as WithDefaultContext
// merges the context: by top-level key, the event's own keys winning,
// nested maps not merged. Identify and Group traits and Alias events are
// not changed. Copying, encoding errors (field "DefaultProperties"),
// callbacks and cost are as for WithDefaultContext. Default: none.
func WithDefaultProperties(props map[string]any) Option {
	return optionFunc(func(s *settings) {
		if err := checkDefaults(props); err != nil {
			s.errs = append(s.errs, invalid("DefaultProperties", fmt.Sprintf("%d keys", len(props)), err.Error()))
		}
		s.defaultProperties = cloneMap(props)
	})
}

// checkDefaults encodes m once, so that a value that is not JSON fails New
// instead of every enqueue call.
func checkDefaults(m map[string]any) error {
	_, err := wire.EncodeMembers(m)
	return err
}
