package analytics

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// R65: an id that is blank after trimming white space and invisible
// characters counts as absent; anything visible keeps it.
func TestBlankID(t *testing.T) {
	for _, id := range []string{"", " ", "   ", "\t\n\r\v\f", "\u00a0", "\u3000", "\u2003\u2009", "\u200b", "\ufeff",
		"\u200d\u200c", "\u00ad", "\u3164", "\u2800", "\u115f\u1160", " \u200b \u3000 "} {
		assert.True(t, blankID(id), "%q", id)
	}
	for _, id := range []string{"u", " u ", "\u3000u", "0", "é", "用户", "\u200bx", "-", "\xff", " \xff"} {
		assert.False(t, blankID(id), "%q", id)
	}
}

// R65: an event whose ids are all blank is rejected at enqueue with
// ErrInvalidMessage, and the field is named; a blank id beside a real one
// is fine.
func TestBlankIDsRejectedAtEnqueue(t *testing.T) {
	c := newTestClient(t, newFakeAPI(nil), nil)
	defer func() { _ = closeClient(t, c, time.Second) }()
	for _, m := range []Message{
		Track{Event: "e", UserID: "   "},
		Track{Event: "e", UserID: "\u3000", AnonymousID: "\u200b"},
		Identify{UserID: " \t"},
		Group{GroupID: "g", AnonymousID: "\u00a0"},
		Page{UserID: "\ufeff"},
		Screen{AnonymousID: " "},
		Alias{UserID: "  ", PreviousID: "p"},
	} {
		err := c.Enqueue(m)
		assert.ErrorIs(t, err, ErrInvalidMessage, "%#v", m)
		assert.ErrorContains(t, err, "white space", "%#v", m)
	}
	for _, m := range []Message{
		Track{Event: "e", UserID: "   ", AnonymousID: "a"},
		Identify{UserID: " u "},
		Alias{UserID: "u", PreviousID: "p"},
	} {
		assert.NoError(t, c.Enqueue(m), "%#v", m)
	}
	assert.EqualValues(t, 7, c.Stats().RejectedInvalid)
}
