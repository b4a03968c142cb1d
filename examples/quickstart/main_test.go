package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/relaykit/analytics-go/analyticstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestRunLocal(t *testing.T) {
	var out strings.Builder
	if err := run(&out, env(nil)); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"sending to a local test endpoint at http://127.0.0.1:",
		"delivered 4, failed 0, handed back 0",
		"POST /v1/batch, User-Agent relaykit-analytics-go/",
		"answered 200",
		`identify`, `"Signed Up"`, `"Pricing"`, `"Order Completed"`,
		"properties: currency=EUR revenue=39.95",
		"traits: name=Ada Lovelace plan=pro",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestRunRemote(t *testing.T) {
	srv := analyticstest.NewServer(t, analyticstest.WithWriteKey("my-key"))
	var out strings.Builder
	err := run(&out, env(map[string]string{"ANALYTICS_WRITE_KEY": "my-key", "ANALYTICS_ENDPOINT": srv.URL()}))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if n := len(srv.Events()); n != 4 {
		t.Errorf("the endpoint received %d events, want 4", n)
	}
	if !strings.Contains(out.String(), "sending to "+srv.URL()) {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestRunReportsFailures(t *testing.T) {
	srv := analyticstest.NewServer(t, analyticstest.WithWriteKey("right-key"))
	var out strings.Builder
	err := run(&out, env(map[string]string{"ANALYTICS_WRITE_KEY": "wrong-key", "ANALYTICS_ENDPOINT": srv.URL()}))
	if err == nil || !strings.Contains(err.Error(), "4 event(s) were not delivered") {
		t.Fatalf("run = %v, want the failure reported", err)
	}
	if !strings.Contains(out.String(), "non-retryable response 401 Unauthorized: invalid write key") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestRunNeedsBothVariables(t *testing.T) {
	for _, vars := range []map[string]string{
		{"ANALYTICS_WRITE_KEY": "k"},
		{"ANALYTICS_ENDPOINT": "http://127.0.0.1:1"},
	} {
		var out strings.Builder
		if err := run(&out, env(vars)); err == nil || !strings.Contains(err.Error(), "set both") {
			t.Errorf("run with %v = %v, want an error asking for both", vars, err)
		}
	}
}
