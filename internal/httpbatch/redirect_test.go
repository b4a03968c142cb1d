package httpbatch

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R11: the policy itself, hop by hop, including where Authorization may go.
func TestCheckRedirectPolicy(t *testing.T) {
	mk := func(method, raw string, status int) *http.Request {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		r := &http.Request{Method: method, URL: u, Header: http.Header{"Authorization": {"Basic x"}}}
		if status != 0 {
			r.Response = &http.Response{StatusCode: status}
		}
		return r
	}
	first := mk("POST", "http://api.test/v1/batch", 0)
	for _, tc := range []struct {
		to     string
		status int
		follow bool
	}{
		{"http://api.test/v1/batch2", 307, true},
		{"http://API.test:80/v1/batch2", 308, true},
		{"https://api.test/v1/batch2", 307, true},
		{"http://api.test/v1/batch2", 302, false},
		{"http://api.test:81/v1/batch2", 307, false},
		{"https://api.test:8443/v1/batch2", 307, false},
		{"http://eu.api.test/v1/batch2", 307, false},
		{"http://api.test.evil/v1/batch2", 307, false},
		{"ftp://api.test/v1/batch2", 307, false},
	} {
		next := mk("POST", tc.to, tc.status)
		err := checkRedirect(next, []*http.Request{first})
		if tc.follow {
			assert.NoError(t, err, tc.to)
			assert.Equal(t, "Basic x", next.Header.Get("Authorization"), tc.to)
		} else {
			assert.ErrorIs(t, err, http.ErrUseLastResponse, "%s %d", tc.to, tc.status)
		}
	}
	// After an upgrade to https, going back to http is a downgrade.
	up := mk("POST", "https://api.test/v1/batch2", 307)
	back := mk("POST", "http://api.test/v1/batch3", 307)
	assert.ErrorIs(t, checkRedirect(back, []*http.Request{first, up}), http.ErrUseLastResponse)
}

func TestRedactURL(t *testing.T) {
	assert.Equal(t, "https://xxxxx@api.test/v1", RedactURL("https://user:pass@api.test/v1"))
	assert.Equal(t, "https://api.test/a@b", RedactURL("https://api.test/a@b"))
	assert.Equal(t, "xxxxx@host", RedactURL("u:p@host"))
}
