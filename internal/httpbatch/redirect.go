package httpbatch

import (
	"net/http"
	"net/url"
	"strings"
)

// NewClient returns the http.Client a Sender uses: a copy of base (nil:
// one of its own over a clone of http.DefaultTransport, sized for conns
// consumers) with CheckRedirect set to the client's redirect policy.
func NewClient(base *http.Client, conns int) *http.Client {
	var c http.Client
	if base != nil {
		c = *base
	} else if dt, ok := http.DefaultTransport.(*http.Transport); !ok {
		// Replaced (httpmock.Activate does so in tests): used as it is.
		c.Transport = http.DefaultTransport
	} else {
		t := dt.Clone()
		// A typical batch (250 events of up to ~500 B) then leaves in one
		// write. A body larger than the buffer makes net/http copy the rest
		// through a fresh 32 KB buffer on every request.
		t.WriteBufferSize = 128 << 10
		// Every consumer may hold a connection; with net/http's default of
		// 2 idle connections per host, the others would be closed after
		// each request and dialled again for the next one.
		t.MaxIdleConnsPerHost = max(conns, http.DefaultMaxIdleConnsPerHost)
		c.Transport = t
	}
	c.CheckRedirect = checkRedirect
	return &c
}

// checkRedirect follows 307 and 308 only, and only within the origin
// (R11): to the same scheme, host and port, or from http to https on the
// same host (default ports, or the same explicit port). Go would re-send
// 301, 302 and 303 as a body-less GET whose 200 would look like delivery,
// and a redirect anywhere else would carry the write key (in the body and
// Authorization) to a server the user did not configure: those responses
// reach Judge as redirect failures (R10), and nothing is sent to the
// other location. A followed request keeps the original Authorization.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) == 0 || len(via) >= 10 || req.Response == nil {
		return http.ErrUseLastResponse
	}
	switch req.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return http.ErrUseLastResponse
	}
	origin, prev := via[0].URL, via[len(via)-1].URL
	if !sameOrigin(origin, req.URL) && !upgrade(origin, req.URL) {
		return http.ErrUseLastResponse
	}
	if prev.Scheme == "https" && req.URL.Scheme != "https" {
		return http.ErrUseLastResponse // no downgrade after an upgrade
	}
	if auth, ok := via[0].Header["Authorization"]; ok {
		req.Header["Authorization"] = auth
	}
	return nil
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// upgrade reports whether to is from on https instead of http: the same
// host, and the default ports (80 → 443) or the same explicit port.
func upgrade(from, to *url.URL) bool {
	if from.Scheme != "http" || to.Scheme != "https" || !strings.EqualFold(from.Hostname(), to.Hostname()) {
		return false
	}
	return port(from) == "80" && port(to) == "443" || from.Port() != "" && from.Port() == to.Port()
}

// port is u's port, or the default port of its scheme.
func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch u.Scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// RedactURL hides the user information (user name and password) of a URL,
// parseable or not, so that it can be logged.
func RedactURL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(raw)
	if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + "xxxxx" + raw[start+at:]
}
