package analytics

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R10, R11: a redirect that is not followed reports where it pointed and
// which WithEndpoint to use, without the write key or a password.
func TestRedirectErrorShowsLocation(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		location string // "" for none
		want     []string
	}{
		{"moved", 301, "https://api.eu.example.com/v1/batch", []string{
			"to https://api.eu.example.com/v1/batch",
			`point WithEndpoint at it: WithEndpoint("https://api.eu.example.com")`}},
		{"relative", 302, "/segment/v1/batch?region=eu", []string{
			"to http://api.test/segment/v1/batch?region=eu",
			`WithEndpoint("http://api.test/segment")`}},
		{"other origin", 307, "https://other.example.com/v1/batch", []string{
			"to https://other.example.com/v1/batch", "not followed", `WithEndpoint("https://other.example.com")`}},
		{"secrets", 308, "https://proxyuser:hunter2@proxy.example.com/ingest?key=secretkey123", []string{
			"to https://xxxxx@proxy.example.com/ingest?key=[redacted]"}},
		{"no Location", 302, "", []string{"redirect response 302 Found"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rep := reply{status: tc.status}
				if tc.location != "" {
					rep.header = map[string]string{"Location": tc.location}
				}
				api := newFakeAPI(sequence(rep))
				cb := &callbacks{}
				c, err := New("secretkey123", append(cb.options(), WithEndpoint("http://api.test"),
					WithHTTPClient(&http.Client{Transport: api}), WithFlushAt(1))...)
				require.NoError(t, err)
				auditLater(t, c, cb)
				mustTrack(t, c, "m1")
				require.NoError(t, closeClient(t, c, time.Second))
				require.Len(t, api.requests(), 1, "nothing sent to the Location")
				require.Len(t, cb.errors(), 1)
				err = cb.errors()[0].err
				he := requireHTTPStatus(t, err, tc.status)
				assert.Equal(t, KindRedirect, he.Kind)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w)
				}
				assert.NotContains(t, err.Error(), "secretkey123")
				assert.NotContains(t, err.Error(), "hunter2")
			})
		})
	}
}
