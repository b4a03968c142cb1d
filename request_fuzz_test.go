package analytics

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// fuzzKey is the write key of FuzzRequestPath; "$KEY" and "$AUTH" in the
// fuzzed answer become the key and its Basic credentials, so the fuzzer
// can make the server echo them anywhere.
const fuzzKey = "fuzz-SECRET-write-key"

// How a fuzzed answer ends.
const (
	endClose    = iota // write the answer, close the connection
	endHold            // write the answer, keep the connection open, send nothing more
	endCut             // write half of the answer, close
	endNothing         // close without a byte
	endKeepOpen        // write the answer, serve the next request on the connection
	endModes
)

// fuzzServer answers every request on 127.0.0.1 with the same raw bytes.
type fuzzServer struct {
	ln     net.Listener
	answer []byte
	end    int
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func startFuzzServer(answer []byte, end int) (*fuzzServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &fuzzServer{ln: ln, answer: answer, end: end, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[conn] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(conn)
		}
	}()
	return s, nil
}

func (s *fuzzServer) serve(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		_ = conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		switch s.end {
		case endNothing:
			return
		case endCut:
			_, _ = conn.Write(s.answer[:len(s.answer)/2])
			return
		}
		if _, err := conn.Write(s.answer); err != nil {
			return
		}
		switch s.end {
		case endHold:
			_, _ = io.Copy(io.Discard, conn)
			return
		case endClose:
			return
		}
	}
}

func (s *fuzzServer) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// FuzzRequestPath serves random status lines, headers, bodies and early
// closes from a raw TCP listener to a real client (sender, verdict,
// consumer, settler) and checks: no panic; Close returns within its
// deadline + 0.5 s and the run within a fixed bound; every event gets
// exactly one callback; the write key appears in no error text and no log.
func FuzzRequestPath(f *testing.F) {
	seeds := []struct {
		status, header, body string
		end                  uint8
	}{
		{"200 OK", "Content-Length: 2", "{}", endKeepOpen},
		{"101 Switching Protocols", "Connection: Upgrade\r\nUpgrade: h2c", "", endHold},
		{"101 Switching Protocols", "", "garbage after the upgrade", endClose},
		{"100 Continue", "", "", endHold},
		{"103 Early Hints", "Link: </x>", "", endClose},
		{"204 No Content", "", "", endKeepOpen},
		{"307 Temporary Redirect", "Location: /v1/batch\r\nContent-Length: 0", "", endKeepOpen},
		{"308 Permanent Redirect", "Location: http://other.invalid/v1/batch\r\nContent-Length: 0", "", endClose},
		{"302 Found", "Location: /elsewhere", "", endClose},
		{"400 Bad Request", "Content-Type: application/json", `{"message":"bad key $KEY"}`, endClose},
		{"401 Unauthorized", "Content-Length: 40", `{"error":"Basic $AUTH"}`, endHold},
		{"404 Not Found", "Content-Length: 10000", "<html>", endHold},
		{"413 Payload Too Large", "Content-Length: 0", "", endKeepOpen},
		{"429 Too Many Requests", "Retry-After: 1\r\nContent-Length: 0", "", endKeepOpen},
		{"503 Service Unavailable", "Retry-After: $KEY", "$KEY", endClose},
		{"500 Internal Server Error", "Transfer-Encoding: chunked", "5\r\nab", endHold},
		{"500 Internal Server Error", "Transfer-Encoding: chunked", "zz\r\n", endClose},
		{"500 x", "Content-Encoding: gzip\r\nContent-Length: 4", "\x1f\x8b\x00\x00", endClose},
		{"600 Odd", "Content-Length: 3", "abc", endKeepOpen},
		{"999", "", "", endClose},
		{"abc", "", "", endClose},
		{"", "", "", endCut},
		{"200 OK", "Content-Length: -1", "", endClose},
		{"200 OK", "Content-Length: 5\r\nContent-Length: 6", "hello", endClose},
		{"200 OK", "\x00bad header", "", endClose},
		{"200 OK", "", "", endNothing},
	}
	for _, s := range seeds {
		f.Add(s.status, s.header, []byte(s.body), s.end)
	}
	basic := base64.StdEncoding.EncodeToString([]byte(fuzzKey + ":"))
	f.Fuzz(func(t *testing.T, status, header string, body []byte, end uint8) {
		expand := func(s string) string {
			return strings.NewReplacer("$KEY", fuzzKey, "$AUTH", basic).Replace(s)
		}
		raw := "HTTP/1.1 " + expand(status) + "\r\n"
		if header != "" {
			raw += expand(header) + "\r\n"
		}
		raw += "\r\n" + expand(string(body))
		srv, err := startFuzzServer([]byte(raw), int(end%endModes))
		if err != nil {
			t.Skip(err)
		}
		defer srv.close()

		core, logs := observer.New(zapcore.DebugLevel)
		var mu sync.Mutex
		calls := map[string]int{}
		var texts []string
		called := make(chan struct{}, 16)
		record := func(err error, msgs []Message) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				calls[m.ID()]++
				select {
				case called <- struct{}{}:
				default: // more callbacks than events: reported below
				}
			}
			if err != nil {
				texts = append(texts, err.Error())
			}
		}
		const timeout = 150 * time.Millisecond
		c, err := New(fuzzKey, WithEndpoint("http://"+srv.ln.Addr().String()), WithLogger(zap.New(core)),
			WithFlushAt(1), WithConsumers(2), WithHTTPTimeout(timeout),
			WithMaxRetries(0), WithMaxRateLimitDuration(0),
			WithOnSuccess(func(msgs []Message) { record(nil, msgs) }),
			WithOnError(record))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ids := []string{"e1", "e2", "e3"}
		for _, id := range ids {
			if err := c.Track(Track{MessageID: id, UserID: "u", Event: "fuzz"}); err != nil {
				t.Fatal(err)
			}
		}
		const closeIn = 3 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), closeIn)
		defer cancel()
		closeStart := time.Now()
		closeErr := c.Close(ctx)
		if d := time.Since(closeStart); d > closeIn+time.Second {
			t.Fatalf("Close took %v (deadline %v)", d, closeIn)
		}
		if closeErr != nil {
			if !errors.Is(closeErr, ErrShutdownInterrupted) {
				t.Fatalf("Close: %v", closeErr)
			}
			texts = append(texts, closeErr.Error())
		}
		// Hand-back callbacks still running when Close returned finish on
		// their own; give them a bounded time.
		wait := time.NewTimer(2 * time.Second)
		defer wait.Stop()
	count:
		for range ids {
			select {
			case <-called:
			case <-wait.C:
				break count
			}
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("run took %v", d)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if calls[id] != 1 {
				t.Fatalf("event %s got %d callbacks, want 1 (answer %q)", id, calls[id], raw)
			}
		}
		if len(calls) != len(ids) {
			t.Fatalf("callbacks for unknown events: %v", calls)
		}
		for _, e := range logs.All() {
			texts = append(texts, fmt.Sprint(e.Message, e.ContextMap()))
		}
		for _, text := range texts {
			if strings.Contains(text, fuzzKey) || strings.Contains(text, basic) {
				t.Fatalf("write key in %q", text)
			}
		}
	})
}
