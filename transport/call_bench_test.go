// call_bench_test.go measures the transport's own cost of one call: a
// POST of one request, its stream and its answer, served by the Handler
// directly (no network, no SDK engine), so that allocations and CPU per
// call are the transport's, the session registry's and the memory
// store's, plus jsonrpc.DecodeMessage.

package transport_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/transport"
)

// BenchmarkCall sends ping calls on one session, one after the other:
// "ready" answers inside Deliver (the answer is in the log when the
// stream starts), "goroutine" from a goroutine of the engine's own, as
// an engine that runs its tools concurrently does.
func BenchmarkCall(b *testing.B) {
	for _, bc := range []struct {
		name string
		gate chan struct{}
	}{
		{"ready", nil},
		{"goroutine", closedGate()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			quiet := slog.New(slog.DiscardHandler)
			st := memory.New(memory.Options{})
			reg := session.New(st, eventlog.New(st, eventlog.Options{}), answerEngine{gate: bc.gate}, session.Options{Logger: quiet})
			defer reg.Close()
			h := transport.New(reg, transport.Options{Logger: quiet})
			defer h.Shutdown(context.Background())

			init := post(h, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
			token := init.Header().Get("Mcp-Session-Id")
			if init.Code != http.StatusOK || token == "" {
				b.Fatalf("initialize: status %d, session %q", init.Code, token)
			}
			post(h, token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+2) + `,"method":"ping"}`
				if rec := post(h, token, body); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"result":{}`) {
					b.Fatalf("call %d: status %d, body %q", i+2, rec.Code, rec.Body)
				}
			}
		})
	}
}

// loopback is the address of the listener the benchmark's requests come to.
var loopback net.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}

func closedGate() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// post serves one POST of body on the session token ("" for none).
func post(h http.Handler, token, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(body))
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, loopback))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		r.Header.Set("Mcp-Session-Id", token)
		r.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(deadlineRecorder{rec}, r)
	return rec
}

// deadlineRecorder is a ResponseRecorder that takes the deadlines a
// connection takes (http.ResponseController), so that a benchmark counts
// what the Handler does on a real connection, not the errors of a
// recorder that has none.
type deadlineRecorder struct{ *httptest.ResponseRecorder }

func (deadlineRecorder) SetReadDeadline(time.Time) error  { return nil }
func (deadlineRecorder) SetWriteDeadline(time.Time) error { return nil }
func (d deadlineRecorder) Unwrap() http.ResponseWriter    { return d.ResponseRecorder }

// BenchmarkInflightBytes measures the scan that counts a body's JSON
// values for the in-flight bound (transport.InflightBytes), over a 4 MiB
// body that is one string (an echo of text) and one that is an array of
// small numbers (a body costly to decode); its MB/s gives the cost per MiB.
func BenchmarkInflightBytes(b *testing.B) {
	const size = 4 << 20
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{"string", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", size) + `"}}}`)},
		{"numbers", []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"pad":[` + strings.Repeat("0,", size/2) + `0]}}}`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				transport.InflightBytes(bc.body)
			}
		})
	}
}
