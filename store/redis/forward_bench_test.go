package redis_test

// BenchmarkForward measures the two ways fleet mode can bring a request
// for a session to the replica that owns it (DESIGN.md, "Fleet mode"), on
// loopback, with the reply stored in the session's log in both:
//
//   - inbox: the receiving replica XADDs the request to a per-session
//     inbox stream; the owner, blocked in XREAD on it, appends the reply to
//     the log; the receiving replica, blocked in Wait, wakes and Reads it.
//   - http: the receiving replica POSTs the request to the owner (one
//     keep-alive connection, as a reverse proxy would); the owner appends
//     the reply to the log and writes it back in the HTTP response.
//
// ns/op is one request's round trip, from the receiving replica's send to
// its having the reply's bytes.
//
//	go test -run '^$' -bench Forward ./store/redis/

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

var request = []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello from another replica"}}}`)

func BenchmarkForward(b *testing.B) {
	testenv.NeedRedis(b)
	srv := redistest.Start(b, redistest.Options{})
	ctx := context.Background()

	b.Run("inbox", func(b *testing.B) {
		owner := open(b, srv, redis.Options{})
		front := open(b, srv, redis.Options{})
		tok := session(b, owner)
		inbox := "bench:{" + tok + "}:inbox"
		rdb := client(b, srv)  // the front replica's connection
		ordb := client(b, srv) // the owner's connection for its inbox reader
		octx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { // the owner's inbox reader
			defer close(done)
			last := "$"
			for octx.Err() == nil {
				res, err := ordb.XRead(octx, &goredis.XReadArgs{Streams: []string{inbox, last}, Block: 100 * time.Millisecond}).Result()
				if errors.Is(err, goredis.Nil) {
					continue
				}
				if err != nil {
					return
				}
				for _, m := range res[0].Messages {
					last = m.ID
					if _, err := owner.Append(ctx, tok, 1, event()); err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
		time.Sleep(50 * time.Millisecond) // the reader blocks on "$"
		var hwm uint64
		b.ResetTimer()
		for b.Loop() {
			if err := rdb.XAdd(ctx, &goredis.XAddArgs{Stream: inbox, MaxLen: 1000, Approx: true, Values: []any{"msg", request}}).Err(); err != nil {
				b.Fatal(err)
			}
			if err := front.Wait(ctx, tok, hwm); err != nil {
				b.Fatal(err)
			}
			evs, _, err := front.Read(ctx, tok, hwm, 10)
			if err != nil || len(evs) != 1 {
				b.Fatalf("Read: %d events, %v", len(evs), err)
			}
			hwm = evs[0].Seq
		}
		b.StopTimer()
		stop()
		<-done
	})

	b.Run("http", func(b *testing.B) {
		owner := open(b, srv, redis.Options{})
		tok := session(b, owner)
		h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			evs := event()
			if _, err := owner.Append(r.Context(), tok, 1, evs); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(evs[0].Data)
		}))
		defer h.Close()
		hc := h.Client()
		defer hc.CloseIdleConnections()
		b.ResetTimer()
		for b.Loop() {
			resp, err := hc.Post(h.URL, "application/json", bytes.NewReader(request))
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || len(body) != len(payload) {
				b.Fatalf("POST: %d, %d bytes, %v", resp.StatusCode, len(body), err)
			}
		}
	})
}
