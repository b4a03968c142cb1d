package analytics_test

import (
	"fmt"
	"log"

	"github.com/relaykit/analytics-go/analyticstest"
	analytics "github.com/relaykit/analytics-go/segmentv3"
)

type printCallback struct{}

func (printCallback) Success(m analytics.Message) {
	fmt.Printf("delivered: %s\n", m.(analytics.Track).Event)
}

func (printCallback) Failure(m analytics.Message, err error) {
	fmt.Printf("not delivered: %v\n", err)
}

// A v3 program, unchanged but for its import line, sending to a local
// recording server.
func ExampleNewWithConfig() {
	server, err := analyticstest.StartServer()
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()

	client, err := analytics.NewWithConfig("write-key", analytics.Config{
		Endpoint:  server.URL(),
		BatchSize: 100,
		Callback:  printCallback{},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = client.Enqueue(analytics.Track{
		UserId:     "user-42",
		Event:      "Order Completed",
		Properties: analytics.NewProperties().SetRevenue(39.95).SetCurrency("EUR"),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Close(); err != nil { // delivers what is queued, within 10 s
		log.Fatal(err)
	}

	e := server.Events()[0]
	fmt.Println(e["type"], e["event"], e["properties"])
	// Output:
	// delivered: Order Completed
	// track Order Completed map[currency:EUR revenue:39.95]
}
