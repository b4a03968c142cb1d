package main

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/relaykit/analytics-go/bench/sink"
)

// The floor is only a fair reference if the sink takes its bodies as it
// takes the SDKs': every event decoded, with a distinct id and its
// properties.amount. floor-http resends one body, so the sink sees the same
// ids again and again.
func TestFloorBodiesAreWhatTheSinkRecords(t *testing.T) {
	for _, tc := range []struct {
		sdk      string
		distinct int64
	}{{"floor", 1010}, {"floor-http", floorBatch}} {
		srv, err := sink.New(sink.Config{})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		c, err := newClient(context.Background(), tc.sdk, hs.URL, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		const n = 1010 // four full bodies and a partial one
		for i := range n {
			if err := c.track(i, "user \"quoted\"\n"); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.close(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := srv.Stats()
		hs.Close()
		if st.Requests != 5 || st.Status["200"] != 5 || st.DecodeErrors != 0 {
			t.Errorf("%s: %d requests, statuses %v, %d decode errors; want 5 answered 200", tc.sdk, st.Requests, st.Status, st.DecodeErrors)
		}
		if st.DistinctIDs != tc.distinct || st.NoID != 0 || st.NoSeq != 0 {
			t.Errorf("%s: %d distinct ids (want %d), %d without id, %d without amount", tc.sdk, st.DistinctIDs, tc.distinct, st.NoID, st.NoSeq)
		}
	}
}
