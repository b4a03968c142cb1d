package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	ours "github.com/relaykit/analytics-go"
)

// floorClient is the "floor" of the flat-out comparison: no SDK at all, only
// the work every SDK here must do for the same events. Each call builds the
// same properties map as the other clients, writes the event's JSON by hand
// (random id, RFC 3339 timestamp, escaped strings, the map in map order, and
// ours' library context, so that the events are as long as ours') into the
// open body, and every 250 events the body goes to one of 8 goroutines
// that POST it through one net/http client tuned as ours is (128 KiB write
// buffer, 8 idle connections). There is no validation, no queue bound, no
// callback, no retry and no accounting: a failed request is only counted.
// Its CPU per event is what the HTTP exchange and a minimal encoder cost on
// this machine, in the same run as the SDKs, so a CPU target can be read
// against it. Clean runs only.
//
// "floor-http" posts one prebuilt body (the first 250 events, encoded as
// above) once every 250 calls, and the calls do nothing else: the HTTP
// exchange alone.
type floorClient struct {
	httpOnly bool
	prebuilt []byte // floor-http: the body every request sends
	url      string
	client   *http.Client
	bodies   chan []byte
	pool     sync.Pool
	wg       sync.WaitGroup
	failed   atomic.Int64

	mu    sync.Mutex // track may be called from several goroutines
	body  []byte
	count int
}

// floorLibrary ends each event: the properties object closed and the
// context with the library that ours writes, so that the floor's events and
// bodies (which carry the write key too) are as long as ours' and the
// floor sends the same bytes for the same events.
const floorLibrary = `},"context":{"library":{"name":"` + ours.LibraryName + `","version":"` + ours.Version + `"}}}`

const (
	floorBatch   = 250
	floorWorkers = 8
)

func newFloorClient(endpoint string, httpOnly bool) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.WriteBufferSize = 128 << 10
	tr.MaxIdleConnsPerHost = floorWorkers
	f := &floorClient{
		url:      endpoint + "/v1/batch",
		client:   &http.Client{Transport: tr},
		bodies:   make(chan []byte, floorWorkers),
		httpOnly: httpOnly,
	}
	f.pool.New = func() any { return make([]byte, 0, 96<<10) }
	for range floorWorkers {
		f.wg.Add(1)
		go f.post()
	}
	return &client{
		track: f.track,
		close: f.close,
		after: func(*Result) {},
	}
}

func (f *floorClient) post() {
	defer f.wg.Done()
	for b := range f.bodies {
		req, err := http.NewRequest(http.MethodPost, f.url, bytes.NewReader(b))
		if err == nil {
			req.Header = http.Header{
				"Content-Type":  {"application/json"},
				"Authorization": {"Basic YmVuY2gtd3JpdGUta2V5Og=="},
			}
			var resp *http.Response
			if resp, err = f.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					f.failed.Add(1)
				}
			}
		}
		if err != nil {
			f.failed.Add(1)
		}
		if !f.httpOnly {
			f.pool.Put(b[:0]) //nolint:staticcheck // a slice header; the bench does not care
		}
	}
}

func (f *floorClient) track(i int, user string) error {
	if f.prebuilt != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.count++; f.count == floorBatch {
			f.count = 0
			f.bodies <- f.prebuilt
		}
		return nil
	}
	props := map[string]any{"plan": "pro", "amount": i, "currency": "EUR", "trial": false}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.body
	if b == nil {
		b = append(f.pool.Get().([]byte), `{"batch":[`...)
	} else {
		b = append(b, ',')
	}
	b = append(b, `{"type":"track","messageId":"`...)
	b = appendFloorUUID(b, rand.Uint64(), rand.Uint64())
	b = append(b, `","timestamp":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","userId":`...)
	b = appendFloorString(b, user)
	b = append(b, `,"event":`...)
	b = appendFloorString(b, eventName)
	b = append(b, `,"properties":{`...)
	first := true
	for k, v := range props {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendFloorString(b, k)
		b = append(b, ':')
		switch x := v.(type) {
		case string:
			b = appendFloorString(b, x)
		case int:
			b = strconv.AppendInt(b, int64(x), 10)
		case bool:
			b = strconv.AppendBool(b, x)
		}
	}
	b = append(b, floorLibrary...)
	f.count++
	if f.count == floorBatch {
		f.send(b)
		b = nil
	}
	f.body = b
	return nil
}

func (f *floorClient) send(b []byte) {
	b = append(b, `],"sentAt":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","writeKey":"bench-write-key"}`...)
	f.count = 0
	if f.httpOnly {
		f.prebuilt = b
	}
	f.bodies <- b
}

func (f *floorClient) close(context.Context) error {
	f.mu.Lock()
	if f.count > 0 && f.prebuilt != nil {
		f.bodies <- f.prebuilt // the last, partial batch: counted as a whole one
	} else if f.body != nil {
		f.send(f.body)
		f.body = nil
	}
	f.mu.Unlock()
	close(f.bodies)
	f.wg.Wait()
	return nil
}

// appendFloorString appends s as a JSON string: copied as is unless it needs
// an escape, then through strconv (close enough for the bench's ASCII).
func appendFloorString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return strconv.AppendQuote(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendFloorUUID appends a version-4-shaped id made of hi and lo.
func appendFloorUUID(b []byte, hi, lo uint64) []byte {
	const hex = "0123456789abcdef"
	var u [36]byte
	j := 0
	for i := range 16 {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			u[j] = '-'
			j++
		}
		w, k := hi, i
		if i >= 8 {
			w, k = lo, i-8
		}
		x := byte(w >> (56 - 8*k))
		u[j], u[j+1] = hex[x>>4], hex[x&0xf]
		j += 2
	}
	return append(b, u[:]...)
}
