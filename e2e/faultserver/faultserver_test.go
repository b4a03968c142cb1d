package faultserver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start starts a server and closes it when the test ends.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// newClient returns a client with its own transport, cleaned up at the end.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

func noRedirect(c *http.Client) *http.Client {
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

type event map[string]any

func batchBody(t *testing.T, writeKey string, events ...event) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"batch":    events,
		"sentAt":   "2025-01-02T03:04:05Z",
		"writeKey": writeKey,
	})
	require.NoError(t, err)
	return b
}

func track(id string) event {
	return event{"type": "track", "event": "e", "userId": "u1", "messageId": id}
}

// post sends body to url+path with the SDK's header set.
func post(t *testing.T, c *http.Client, url, path string, body []byte, hdr map[string]string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "analytics-go/test")
	req.SetBasicAuth("wk", "")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return c.Do(req)
}

// send posts a one-event batch and returns status, body and headers.
func send(t *testing.T, c *http.Client, url, id string) (int, string, http.Header) {
	t.Helper()
	resp, err := post(t, c, url, "/v1/batch", batchBody(t, "wk", track(id)), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestScriptOrderAndRepeat(t *testing.T) {
	s := start(t, Options{Script: []Response{
		{Status: 500, Body: `{"code":"x"}`},
		RetryAfter(429, "2"),
		Reply(202, "ok"),
	}})
	c := newClient(t)
	var statuses []int
	for i := range 5 {
		st, body, h := send(t, c, s.URL(), "m"+strconv.Itoa(i))
		statuses = append(statuses, st)
		switch i {
		case 0:
			assert.Equal(t, `{"code":"x"}`, body)
			assert.Equal(t, "application/json", h.Get("Content-Type"))
		case 1:
			assert.Equal(t, "2", h.Get("Retry-After"))
		default:
			assert.Equal(t, "ok", body)
		}
	}
	assert.Equal(t, []int{500, 429, 202, 202, 202}, statuses)
	reqs := s.Requests()
	require.Len(t, reqs, 5)
	for i, r := range reqs {
		assert.Equal(t, i, r.Index)
		assert.Equal(t, statuses[i], r.Status)
		assert.Equal(t, []string{"m" + strconv.Itoa(i)}, r.MessageIDs)
		assert.True(t, r.Done())
		assert.False(t, r.Responded.Before(r.Arrived))
		assert.False(t, r.Finished.Before(r.Responded))
	}
	assert.Equal(t, map[string]int{"m2": 1, "m3": 1, "m4": 1}, s.Delivered())
}

func TestDefaultResponse(t *testing.T) {
	s := start(t, Options{})
	st, body, h := send(t, newClient(t), s.URL(), "m1")
	assert.Equal(t, 200, st)
	assert.Equal(t, "{}", body)
	assert.Equal(t, "application/json", h.Get("Content-Type"))
}

func TestHeadersVerbatimAndOddStatuses(t *testing.T) {
	s := start(t, Options{Script: []Response{
		{Status: 429, Header: map[string]string{"retry-after": "", "X-Extra": " a b "}},
		{Status: 204, Body: "ignored"},
		{Status: 600},
		{Status: 999, Body: "<html>x</html>"},
		{Status: 300},
	}})
	c := newClient(t)

	resp, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track("a")), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 429, resp.StatusCode)
	v, ok := resp.Header["Retry-After"]
	require.True(t, ok, "empty Retry-After must be sent")
	assert.Equal(t, []string{""}, v)
	assert.Equal(t, "a b", resp.Header.Get("X-Extra")) // HTTP trims outer whitespace

	st, body, _ := send(t, c, s.URL(), "b")
	assert.Equal(t, 204, st)
	assert.Empty(t, body)
	st, _, _ = send(t, c, s.URL(), "c")
	assert.Equal(t, 600, st)
	st, body, _ = send(t, c, s.URL(), "d")
	assert.Equal(t, 999, st)
	assert.Equal(t, "<html>x</html>", body)

	resp, err = post(t, noRedirect(newClient(t)), s.URL(), "/v1/batch", batchBody(t, "wk", track("e")), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 300, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("Location"))

	assert.Equal(t, map[string]int{"b": 1}, s.Delivered())
}

func TestRecordsRequestFields(t *testing.T) {
	s := start(t, Options{})
	c := newClient(t)
	body := batchBody(t, "bodykey", track("m1"), event{"type": "identify", "anonymousId": "a", "messageId": "m2"}, event{"type": "track"})
	resp, err := post(t, c, s.URL(), "/v1/batch", body, map[string]string{"X-Retry-Count": "2"})
	require.NoError(t, err)
	resp.Body.Close()

	r := s.Requests()[0]
	assert.Equal(t, http.MethodPost, r.Method)
	assert.Equal(t, "/v1/batch", r.Path)
	assert.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("wk:")), r.Header.Get("Authorization"))
	assert.Equal(t, "2", r.Header.Get("X-Retry-Count"))
	assert.Equal(t, "analytics-go/test", r.Header.Get("User-Agent"))
	assert.Equal(t, body, r.RawBody)
	assert.Equal(t, body, r.Body)
	assert.Equal(t, []string{"m1", "m2", ""}, r.MessageIDs)
	require.Len(t, r.Events, 3)
	assert.Equal(t, "identify", r.Events[1]["type"])
	assert.Equal(t, "2025-01-02T03:04:05Z", r.SentAt)
	assert.Equal(t, "wk", r.WriteKey)
	assert.Equal(t, "bodykey", r.BodyWriteKey)
	assert.Equal(t, map[string]int{"m1": 1, "m2": 1}, s.Delivered())
}

func TestAllPathsAndMethodsRecorded(t *testing.T) {
	s := start(t, Options{})
	c := newClient(t)
	resp, err := c.Get(s.URL() + "/anything?q=1")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	req, err := http.NewRequest(http.MethodPut, s.URL()+"/v1/batch-alt", bytes.NewReader([]byte("not json")))
	require.NoError(t, err)
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()

	reqs := s.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "GET", reqs[0].Method)
	assert.Equal(t, "/anything", reqs[0].Path)
	assert.Equal(t, "PUT", reqs[1].Method)
	assert.Equal(t, "/v1/batch-alt", reqs[1].Path)
	assert.Equal(t, []byte("not json"), reqs[1].Body)
	assert.Empty(t, reqs[1].MessageIDs)
}

func TestRulesByMessageIDAndPath(t *testing.T) {
	s := start(t, Options{
		Rules: []Rule{
			{MessageID: "m2", Responses: []Response{RetryAfter(429, "1"), {Status: 201}}},
			{Path: "/other"}, // empty Responses: 200 {}
		},
		Script: []Response{{Status: 500}, {Status: 200}},
	})
	c := newClient(t)
	order := []struct {
		id   string
		want int
	}{
		{"m1", 500}, // script[0]
		{"m2", 429}, // rule[0]
		{"m3", 200}, // script[1]
		{"m2", 201}, // rule[0]
		{"m2", 201}, // rule[0] repeats last
		{"m4", 200}, // script repeats last
	}
	for _, o := range order {
		st, _, _ := send(t, c, s.URL(), o.id)
		assert.Equal(t, o.want, st, o.id)
	}
	resp, err := post(t, c, s.URL(), "/other", batchBody(t, "wk", track("m9")), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "{}", string(b))

	// A rule matches any event of a multi-event batch.
	st, _, _ := func() (int, string, http.Header) {
		resp, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track("x"), track("m2")), nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, "", nil
	}()
	assert.Equal(t, 201, st)
	assert.Equal(t, map[string]int{"m2": 3, "m3": 1, "m4": 1, "m9": 1, "x": 1}, s.Delivered())
}

func TestRedirects(t *testing.T) {
	t.Run("307 followed with body", func(t *testing.T) {
		s := start(t, Options{
			Rules:  []Rule{{Path: "/v1/batch-alt", Responses: []Response{{Status: 200}}}},
			Script: []Response{RedirectTo(307, "/v1/batch-alt")},
		})
		body := batchBody(t, "wk", track("m1"))
		resp, err := post(t, newClient(t), s.URL(), "/v1/batch", body, nil)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
		reqs := s.Requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, 307, reqs[0].Status)
		assert.Equal(t, "POST", reqs[1].Method)
		assert.Equal(t, "/v1/batch-alt", reqs[1].Path)
		assert.Equal(t, body, reqs[1].RawBody)
		assert.Equal(t, reqs[0].Header.Get("Authorization"), reqs[1].Header.Get("Authorization"))
		assert.Equal(t, map[string]int{"m1": 1}, s.Delivered())
	})
	t.Run("302 not followed", func(t *testing.T) {
		s := start(t, Options{Script: []Response{RedirectTo(302, "/v1/batch-alt"), {}}})
		resp, err := post(t, noRedirect(newClient(t)), s.URL(), "/v1/batch", batchBody(t, "wk", track("m1")), nil)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 302, resp.StatusCode)
		assert.Equal(t, "/v1/batch-alt", resp.Header.Get("Location"))
		assert.Len(t, s.Requests(), 1)
		assert.Empty(t, s.Delivered())
	})
	t.Run("no location", func(t *testing.T) {
		assert.Nil(t, RedirectTo(302, "").Header)
	})
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestGzipDecoding(t *testing.T) {
	s := start(t, Options{})
	c := newClient(t)
	body := batchBody(t, "wk", track("g1"), track("g2"))
	zipped := gz(t, body)
	resp, err := post(t, c, s.URL(), "/v1/batch", zipped, map[string]string{"Content-Encoding": "gzip"})
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = post(t, c, s.URL(), "/v1/batch", zipped[:len(zipped)-5], map[string]string{"Content-Encoding": "gzip"})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "without Gateway a corrupt body still gets the script")

	reqs := s.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, zipped, reqs[0].RawBody)
	assert.Equal(t, body, reqs[0].Body)
	assert.Equal(t, []string{"g1", "g2"}, reqs[0].MessageIDs)
	assert.Nil(t, reqs[1].Body)
	assert.Empty(t, reqs[1].MessageIDs)
	assert.Equal(t, map[string]int{"g1": 1, "g2": 1}, s.Delivered())
}

func TestCloseWithoutResponse(t *testing.T) {
	s := start(t, Options{Script: []Response{{CloseWithoutResponse: true}, {}}})
	c := newClient(t)
	_, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track("m1")), nil)
	require.Error(t, err)
	st, _, _ := send(t, c, s.URL(), "m1")
	assert.Equal(t, 200, st)

	reqs, err := s.WaitFinished(ctxT(t, time.Second), 2)
	require.NoError(t, err)
	assert.Equal(t, 0, reqs[0].Status)
	assert.True(t, reqs[0].Responded.IsZero())
	assert.False(t, reqs[0].Finished.IsZero())
	assert.Equal(t, []string{"m1"}, reqs[0].MessageIDs, "recorded although closed")
	assert.Equal(t, map[string]int{"m1": 1}, s.Delivered())
}

func TestTruncateBody(t *testing.T) {
	s := start(t, Options{Script: []Response{
		{Status: 500, Body: "0123456789", TruncateBody: true, Header: map[string]string{"Retry-After": "1"}},
		{Status: 400, Body: "abc", TruncateBody: true, ContentLength: 500},
		{Status: 200, Body: "{}", TruncateBody: true},
	}})
	c := newClient(t)
	check := func(wantStatus int, wantCL int64, wantPrefix string) {
		t.Helper()
		resp, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track("m")), nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		assert.Equal(t, wantStatus, resp.StatusCode)
		assert.Equal(t, wantCL, resp.ContentLength)
		b, err := io.ReadAll(resp.Body)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		assert.Equal(t, wantPrefix, string(b))
	}
	check(500, 1010, "0123456789")
	assert.Equal(t, 500, s.Requests()[0].Status)
	check(400, 500, "abc")
	check(200, 1002, "{}")
	reqs, err := s.WaitFinished(ctxT(t, time.Second), 3)
	require.NoError(t, err)
	assert.Equal(t, []int{500, 400, 200}, []int{reqs[0].Status, reqs[1].Status, reqs[2].Status})
	assert.Equal(t, map[string]int{"m": 1}, s.Delivered())
}

func TestDelayRecordsFirst(t *testing.T) {
	const d = 150 * time.Millisecond
	s := start(t, Options{Script: []Response{{Delay: d, Status: 503}}})
	c := newClient(t)
	done := make(chan int, 1)
	t0 := time.Now()
	go func() {
		resp, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track("m1")), nil)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	reqs, err := s.WaitRequests(ctxT(t, time.Second), 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"m1"}, reqs[0].MessageIDs, "recorded while the response is held")
	assert.Zero(t, reqs[0].Status)
	assert.Less(t, time.Since(t0), d)
	assert.Equal(t, 503, <-done)
	assert.GreaterOrEqual(t, time.Since(t0), d)
	r := s.Requests()[0]
	assert.GreaterOrEqual(t, r.Responded.Sub(r.Arrived), d)
}

func TestDelayAbortsWhenClientLeaves(t *testing.T) {
	s := start(t, Options{Script: []Response{{Delay: 10 * time.Second}}})
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/batch", bytes.NewReader(batchBody(t, "wk", track("m1"))))
	require.NoError(t, err)
	_, err = c.Do(req)
	require.Error(t, err)
	reqs, err := s.WaitFinished(ctxT(t, time.Second), 1)
	require.NoError(t, err)
	assert.True(t, reqs[0].Aborted)
	assert.Zero(t, reqs[0].Status)
	assert.Less(t, reqs[0].Finished.Sub(reqs[0].Arrived), time.Second)
	assert.Empty(t, s.Delivered())
}

func TestCloseAbortsHeldResponses(t *testing.T) {
	s, err := Start(Options{Script: []Response{{Delay: 10 * time.Second}}})
	require.NoError(t, err)
	c := newClient(t)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track(strconv.Itoa(i))), nil)
			errs <- err
		}()
	}
	_, err = s.WaitRequests(ctxT(t, time.Second), 3)
	require.NoError(t, err)
	t0 := time.Now()
	s.Close()
	assert.Less(t, time.Since(t0), 500*time.Millisecond)
	for range 3 {
		assert.Error(t, <-errs)
	}
	for _, r := range s.Requests() {
		assert.True(t, r.Aborted)
		assert.Zero(t, r.Status)
	}
	s.Close() // idempotent
	_, err = s.WaitRequests(context.Background(), 4)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestCloseWithHijackedAndIdleConnections(t *testing.T) {
	s, err := Start(Options{Script: []Response{{}, {CloseWithoutResponse: true}, {TruncateBody: true, Body: "x"}}})
	require.NoError(t, err)
	c := newClient(t)
	st, _, _ := send(t, c, s.URL(), "a") // leaves an idle keep-alive conn
	assert.Equal(t, 200, st)
	_, err = post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track("b")), nil)
	assert.Error(t, err)
	s.Close()
	_, err = post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track("c")), nil)
	assert.Error(t, err, "refused after Close")
	assert.Len(t, s.Requests(), 2)
}

func TestGatewayRejections(t *testing.T) {
	s := start(t, Options{
		Gateway:      true,
		WriteKeys:    []string{"wk", "bodykey"},
		MaxBodyBytes: 400,
		MaxEvents:    3,
		Script:       []Response{{Status: 202, Body: `{"ok":true}`}},
	})
	c := newClient(t)
	valid := batchBody(t, "wk", track("v1"))
	big := batchBody(t, "wk", event{"type": "track", "userId": "u", "messageId": "big", "pad": string(bytes.Repeat([]byte("x"), 500))})
	zipped := gz(t, valid)
	cases := []struct {
		name     string
		method   string
		body     []byte
		hdr      map[string]string
		noAuth   bool
		status   int
		code     string
		ids      []string
		rejected bool
	}{
		{name: "valid", body: valid, status: 202, ids: []string{"v1"}},
		{name: "valid gzip", body: zipped, hdr: map[string]string{"Content-Encoding": "gzip"}, status: 202},
		{name: "method", method: http.MethodGet, status: 405, code: "method_not_allowed"},
		{name: "corrupt gzip", body: zipped[:10], hdr: map[string]string{"Content-Encoding": "gzip"}, status: 400, code: "invalid_encoding"},
		{name: "unsupported encoding", body: valid, hdr: map[string]string{"Content-Encoding": "br"}, status: 415, code: "unsupported_encoding"},
		{name: "too large", body: big, status: 413, code: "payload_too_large"},
		{name: "too large after gunzip", body: gz(t, big), hdr: map[string]string{"Content-Encoding": "gzip"}, status: 413, code: "payload_too_large"},
		{name: "invalid json", body: []byte(`{"batch":[`), status: 400, code: "invalid_json"},
		{name: "json array", body: []byte(`[]`), status: 400, code: "invalid_json"},
		{name: "missing batch", body: []byte(`{"sentAt":"x"}`), status: 400, code: "missing_batch"},
		{name: "batch not array", body: []byte(`{"batch":{}}`), status: 400, code: "missing_batch"},
		{name: "wrong key", body: valid, hdr: map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("nope:"))}, status: 401, code: "unauthorized"},
		{name: "body key fallback ok", body: batchBody(t, "bodykey", track("v2")), noAuth: true, status: 202},
		{name: "body key fallback wrong", body: batchBody(t, "nope", track("v3")), noAuth: true, status: 401, code: "unauthorized"},
		{name: "no identity", body: batchBody(t, "wk", track("v4"), event{"type": "track", "messageId": "v5", "userId": ""}), status: 400, code: "missing_identity"},
		{name: "anonymous ok", body: batchBody(t, "wk", event{"type": "page", "anonymousId": "a", "messageId": "v6"}), status: 202},
		{name: "alias without previousId", body: batchBody(t, "wk", event{"type": "alias", "userId": "u", "anonymousId": "a"}), status: 400, code: "missing_identity"},
		{name: "alias ok", body: batchBody(t, "wk", event{"type": "alias", "userId": "u", "previousId": "p"}), status: 202},
		{name: "event not object", body: []byte(`{"batch":[1]}`), status: 400, code: "invalid_event"},
		{name: "blank userId", body: batchBody(t, "wk", track("v7"), event{"type": "track", "messageId": "v8", "userId": " \u3000\u200b\t"}), status: 400, code: "missing_identity"},
		{name: "blank ids", body: batchBody(t, "wk", event{"type": "track", "messageId": "v9", "userId": "\u00a0", "anonymousId": "\ufeff\u3164"}), status: 400, code: "missing_identity"},
		{name: "blank alias previousId", body: batchBody(t, "wk", event{"type": "alias", "userId": "u", "previousId": "  "}), status: 400, code: "missing_identity"},
		{name: "id not a string", body: batchBody(t, "wk", event{"type": "track", "messageId": "v10", "userId": 7}), status: 400, code: "missing_identity"},
		{name: "visible id with spaces", body: batchBody(t, "wk", event{"type": "track", "messageId": "v11", "userId": " u "}), status: 202},
		{name: "events at the limit", body: batchBody(t, "wk", track("v12"), track("v13"), track("v14")), status: 202},
		{name: "too many events", body: batchBody(t, "wk", track("v15"), track("v16"), track("v17"), track("v18")), status: 429, code: "too_many_events"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequest(method, s.URL()+"/v1/batch", bytes.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			if !tc.noAuth {
				req.SetBasicAuth("wk", "")
			}
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := c.Do(req)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.StatusCode, string(b))
			reqs := s.Requests()
			last := reqs[len(reqs)-1]
			assert.Equal(t, tc.code, last.Rejected)
			if tc.code == "" {
				assert.JSONEq(t, `{"ok":true}`, string(b))
				return
			}
			var e struct{ Code, Message string }
			require.NoError(t, json.Unmarshal(b, &e), string(b))
			assert.Equal(t, tc.code, e.Code)
			assert.NotEmpty(t, e.Message)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			if tc.status == 405 {
				assert.Equal(t, "POST", resp.Header.Get("Allow"))
			}
			_, hasRA := resp.Header["Retry-After"]
			assert.False(t, hasRA, "no rejection carries Retry-After")
		})
	}
	d := s.Delivered()
	assert.Equal(t, 2, d["v1"])
	assert.Equal(t, 1, d["v2"])
	assert.Zero(t, d["v4"]+d["v5"]+d["big"]+d["v7"]+d["v15"])
	assert.Equal(t, 1, d["v11"])
}

func TestGatewayAnyKeyAndDefaultLimit(t *testing.T) {
	s := start(t, Options{Gateway: true, Script: []Response{{Status: 500}, {}}})
	c := newClient(t)
	st, _, _ := send(t, c, s.URL(), "m1")
	assert.Equal(t, 500, st, "gateway passes, script applies, rejection did not consume it")
	body := batchBody(t, "", event{"type": "track", "userId": "u", "pad": string(bytes.Repeat([]byte("x"), DefaultMaxBodyBytes))})
	resp, err := post(t, c, s.URL(), "/v1/batch", body, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 413, resp.StatusCode)
	st, _, _ = send(t, c, s.URL(), "m1")
	assert.Equal(t, 200, st)
}

func TestReserveAddrAndStartOn(t *testing.T) {
	addr, err := ReserveAddr()
	require.NoError(t, err)
	c := newClient(t)
	_, err = post(t, c, "http://"+addr, "/v1/batch", batchBody(t, "wk", track("m1")), nil)
	require.Error(t, err, "nothing listens yet")

	s, err := StartOn(addr, Options{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	assert.Equal(t, "http://"+addr, s.URL())
	assert.Equal(t, addr, s.Addr())
	st, _, _ := send(t, c, s.URL(), "m1")
	assert.Equal(t, 200, st)
	assert.Len(t, s.Requests(), 1)
}

func TestStartOnRejectsNonLoopback(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "example.com:80", "10.1.2.3:0", "nonsense"} {
		_, err := StartOn(addr, Options{})
		assert.Error(t, err, addr)
	}
}

func TestWaitRequests(t *testing.T) {
	s := start(t, Options{})
	c := newClient(t)

	_, err := s.WaitRequests(ctxT(t, 30*time.Millisecond), 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 3 {
			time.Sleep(10 * time.Millisecond)
			resp, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track(strconv.Itoa(i))), nil)
			if err == nil {
				resp.Body.Close()
			}
		}
	})
	reqs, err := s.WaitRequests(ctxT(t, time.Second), 3)
	require.NoError(t, err)
	assert.Len(t, reqs, 3)
	wg.Wait()
	reqs, err = s.WaitFinished(ctxT(t, time.Second), 3)
	require.NoError(t, err)
	for _, r := range reqs {
		assert.Equal(t, 200, r.Status)
	}
	reqs, err = s.WaitRequests(context.Background(), 0)
	require.NoError(t, err)
	assert.Len(t, reqs, 3)
}

func TestSetOptionsResetsScript(t *testing.T) {
	s := start(t, Options{Script: []Response{{Status: 500}, {Status: 200}}})
	c := newClient(t)
	st, _, _ := send(t, c, s.URL(), "a")
	assert.Equal(t, 500, st)
	s.SetOptions(Options{Script: []Response{{Status: 503}, {Status: 201}}})
	st, _, _ = send(t, c, s.URL(), "b")
	assert.Equal(t, 503, st)
	st, _, _ = send(t, c, s.URL(), "c")
	assert.Equal(t, 201, st)
	assert.Len(t, s.Requests(), 3, "records are kept")
}

func TestOptionsAreCopied(t *testing.T) {
	script := []Response{{Status: 500}}
	s := start(t, Options{Script: script})
	script[0].Status = 201
	st, _, _ := send(t, newClient(t), s.URL(), "a")
	assert.Equal(t, 500, st)
}

func TestRespondOverride(t *testing.T) {
	var seen []int
	s := start(t, Options{
		Script: []Response{{Status: 201}},
		Respond: func(index int, r *Request) (Response, bool) {
			seen = append(seen, index) // calls are serialised
			if len(r.MessageIDs) == 1 && r.MessageIDs[0] == "fault" {
				return Response{Status: 503, Header: map[string]string{"Retry-After": "1"}}, true
			}
			return Response{}, false
		},
	})
	c := newClient(t)
	st, _, _ := send(t, c, s.URL(), "fault")
	assert.Equal(t, 503, st)
	st, _, _ = send(t, c, s.URL(), "ok")
	assert.Equal(t, 201, st)
	assert.Equal(t, []int{0, 1}, seen)
}

// TestConcurrency runs many concurrent requests with seeded random faults
// (like scenario S43); run with -race.
func TestConcurrency(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := start(t, Options{
		Rules: []Rule{{MessageID: "rule", Responses: []Response{{Status: 500}, {Status: 200}}}},
		Respond: func(_ int, r *Request) (Response, bool) {
			switch p := rng.IntN(10); {
			case p < 3:
				return Response{Status: 500}, true
			case p < 4:
				return RetryAfter(503, "1"), true
			case p < 5:
				return Response{CloseWithoutResponse: true}, true
			case p < 6:
				return Response{Delay: 5 * time.Millisecond}, true
			}
			return Response{}, false
		},
	})
	c := newClient(t)
	const workers, per = 16, 8
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				id := fmt.Sprintf("w%d-%d", w, i)
				resp, err := post(t, c, s.URL(), "/v1/batch", batchBody(t, "wk", track(id), track("rule")), nil)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					mu.Lock()
					got[id]++
					got["rule"]++
					mu.Unlock()
				}
				_ = s.Delivered()
				_ = s.Requests()
			}
		})
	}
	wg.Wait()
	reqs, err := s.WaitFinished(ctxT(t, time.Second), workers*per)
	require.NoError(t, err)
	require.Len(t, reqs, workers*per)
	for i, r := range reqs {
		assert.Equal(t, i, r.Index)
	}
	assert.Equal(t, got, s.Delivered())
	assert.Positive(t, got["rule"])
	assert.Less(t, got["rule"], workers*per)
}

func TestHelpers(t *testing.T) {
	assert.Equal(t, 200, Response{}.StatusCode())
	assert.Equal(t, 418, Reply(418, "t").StatusCode())
	r := RetryAfter(429, "")
	v, ok := r.Header["Retry-After"]
	assert.True(t, ok)
	assert.Empty(t, v)
	assert.Equal(t, "/x", RedirectTo(308, "/x").Header["Location"])
	assert.True(t, Request{Status: 204}.Delivered())
	assert.False(t, Request{Status: 302}.Delivered())
	assert.True(t, errors.Is(ErrClosed, ErrClosed))
}

func TestSwitchProtocolsHoldsTheConnection(t *testing.T) {
	s := start(t, Options{Script: []Response{SwitchingProtocols()}})
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	body := batchBody(t, "wk", track("m1"))
	_, err = fmt.Fprintf(conn, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	assert.Equal(t, 101, resp.StatusCode)
	assert.Equal(t, "Upgrade", resp.Header.Get("Connection"))

	reqs, err := s.WaitRequests(ctxT(t, time.Second), 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"m1"}, reqs[0].MessageIDs)
	// Held: nothing more arrives and the request is not finished.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	n, err := br.Read(make([]byte, 1))
	assert.Zero(t, n)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.False(t, s.Requests()[0].Done())

	// The client closing its end finishes the request.
	require.NoError(t, conn.Close())
	reqs, err = s.WaitFinished(ctxT(t, 2*time.Second), 1)
	require.NoError(t, err)
	assert.Equal(t, 101, reqs[0].Status)
	assert.Empty(t, s.Delivered())
}

func TestSwitchProtocolsEndsAtClose(t *testing.T) {
	s, err := Start(Options{Script: []Response{SwitchingProtocols()}})
	require.NoError(t, err)
	conn, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	_, err = http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a held 101 connection")
	}
	assert.True(t, s.Requests()[0].Done())
}

func TestURLAs(t *testing.T) {
	s := start(t, Options{})
	_, port, err := net.SplitHostPort(s.Addr())
	require.NoError(t, err)
	assert.Equal(t, "http://localhost:"+port, s.URLAs("localhost"))
	st, _, _ := send(t, newClient(t), s.URLAs("localhost"), "m1")
	assert.Equal(t, 200, st)
}
