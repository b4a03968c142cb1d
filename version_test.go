package analytics_test

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/relaykit/analytics-go"
	"github.com/relaykit/analytics-go/analyticstest"
)

// releaseHeading matches a Keep a Changelog release heading such as
// "## [0.1.0] - 2026-11-30" ("## [Unreleased]" does not match).
var releaseHeading = regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})\s*$`)

func TestVersionMatchesChangelog(t *testing.T) {
	raw, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := releaseHeading.FindSubmatch(raw)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading of the form ## [x.y.z] - YYYY-MM-DD")
	}
	if newest := string(m[1]); newest != analytics.Version {
		t.Errorf("analytics.Version = %q, but the newest release in CHANGELOG.md is %q", analytics.Version, newest)
	}
	if _, err := time.Parse(time.DateOnly, string(m[2])); err != nil {
		t.Errorf("release date %q: %v", m[2], err)
	}
}

func TestVersionIsSentOnTheWire(t *testing.T) {
	srv := analyticstest.NewServer(t)
	client, err := analytics.New("key", analytics.WithEndpoint(srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	_ = client.Track(analytics.Track{UserID: "u", Event: "E"})
	// A context the caller set keeps its own fields; the library is added.
	_ = client.Track(analytics.Track{UserID: "u", Event: "E", Context: analytics.ContextFields{"ip": "203.0.113.9"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Close(ctx); err != nil {
		t.Fatal(err)
	}

	reqs := srv.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request received")
	}
	wantUA := "relaykit-analytics-go/" + analytics.Version
	for _, r := range reqs {
		if ua := r.Header.Get("User-Agent"); ua != wantUA {
			t.Errorf("User-Agent %q, want %q", ua, wantUA)
		}
	}
	events := srv.Events()
	if len(events) != 2 {
		t.Fatalf("%d events received, want 2", len(events))
	}
	for i, e := range events {
		ctx, _ := e["context"].(map[string]any)
		lib, _ := ctx["library"].(map[string]any)
		if lib["name"] != analytics.LibraryName || lib["version"] != analytics.Version {
			t.Errorf("event %d: context.library = %v, want name %q version %q", i, lib, analytics.LibraryName, analytics.Version)
		}
	}
	if ctx, _ := events[1]["context"].(map[string]any); ctx["ip"] != "203.0.113.9" {
		t.Errorf("caller's context lost: %v", ctx)
	}
}
