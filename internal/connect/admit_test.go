package connect_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestAdmit runs testdata/admit. Command:
//
//	admit in-flight=N queued=N max-calls=N max-queued=N
//
// prints what becomes of a host's call read then.
func TestAdmit(t *testing.T) {
	datadriven.RunTest(t, "testdata/admit", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "admit" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		var inFlight, queued, maxCalls, maxQueued int
		d.ScanArgs(t, "in-flight", &inFlight)
		d.ScanArgs(t, "queued", &queued)
		d.ScanArgs(t, "max-calls", &maxCalls)
		d.ScanArgs(t, "max-queued", &maxQueued)
		return string(connect.Admit(inFlight, queued, maxCalls, maxQueued)) + "\n"
	})
}

// counting serves with h and counts the POSTs it answered 429.
type counting struct {
	h        http.Handler
	rejected atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cw := &statusWriter{ResponseWriter: w}
	c.h.ServeHTTP(cw, r)
	if cw.status == http.StatusTooManyRequests {
		c.rejected.Add(1)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestBurstBeyondServerBound: a host's burst of 300 calls, written at
// once, toward a Tidemark server that takes at most 8 calls in flight per
// session (429 too_many_calls beyond): with the default --max-calls (32)
// the bridge queues what is beyond it and sends again, after Retry-After,
// a call the server answered 429, so all 300 get their echo; with
// --max-calls 8 the bridge never sends more than the server takes.
// Toward the sessionless era (no session, so no per-session bound) the
// burst passes the same queue.
func TestBurstBeyondServerBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol string
		maxCalls int
	}{
		{"stateful, default max-calls", connect.ProtocolStateful, 0},
		{"stateful, max-calls 8", connect.ProtocolStateful, 8},
		{"sessionless, default max-calls", connect.ProtocolSessionless, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const burst, bound = 300, 8
			h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
				Transport: transport.Options{Retry: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
				Sessions:  session.Options{MaxCallsPerSession: bound},
			})
			cs := &counting{h: h}
			srv := serveClosing(t, cs, h)
			host := startRawHost(t, srv.URL, connect.Options{Protocol: tc.protocol, MaxCalls: tc.maxCalls, InitialBackoff: 50 * time.Millisecond}, nil)
			host.send(rawInitialize)
			host.answers("6")
			host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			lines := make([]string, burst)
			for i := range lines {
				lines[i] = echoLine(strconv.Itoa(100 + i))
			}
			host.send(strings.Join(lines, "\n"))
			ok, failed := 0, map[string]string{}
			for range burst {
				m := host.next()
				if m.Method != "" {
					continue
				}
				want := `"content":[{"type":"text","text":"` + string(m.ID) + `"}]`
				if m.Error == nil && strings.Contains(m.text, want) {
					ok++
				} else {
					failed[string(m.ID)] = m.text
				}
			}
			if ok != burst {
				for id, text := range failed {
					t.Errorf("call %s: %.300s", id, text)
					break
				}
				t.Fatalf("%d of %d calls answered with their echo, %d failed (one shown)", ok, burst, len(failed))
			}
			t.Logf("the server answered %d POSTs 429", cs.rejected.Load())
		})
	}
}

// TestQueueFull: with --max-calls 1 and --max-queued-calls 2, a host's
// fourth call while the first runs is answered at once, never sent:
// -32603, error.data.reason too_many_calls, and a message that says what
// to do; a queued call the host cancels is never sent, and frees its
// place; the others run one at a time, in order, once the first ends.
func TestQueueFull(t *testing.T) {
	for _, protocol := range []string{connect.ProtocolStateful, connect.ProtocolSessionless} {
		t.Run(protocol, func(t *testing.T) { queueFull(t, protocol) })
	}
}

func queueFull(t *testing.T, protocol string) {
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	s := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, args struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		ran = append(ran, args.Text)
		mu.Unlock()
		if args.Text == "1" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return textResult(args.Text), nil, nil
	})
	srv := serve(t, s, nil)
	host := startRawHost(t, srv.URL, connect.Options{Protocol: protocol, MaxCalls: 1, MaxQueued: 2}, nil)
	host.send(rawInitialize)
	host.answers("6")
	host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		echoLine("1"), echoLine("2"), echoLine("3"), echoLine("4"))
	r := host.next()
	const say = "tidemark connect has the most calls in flight to the MCP server (--max-calls 1) and waiting (--max-queued-calls 2), and did not send this one: send it again once earlier calls are answered, or raise --max-queued-calls"
	if string(r.ID) != "4" || r.Error == nil || r.Error.Code != -32603 || string(r.Error.Data) != `{"reason":"too_many_calls"}` || r.Error.Message != say {
		t.Errorf("first line: %s, want the answer to 4: -32603 too_many_calls: %s", r.text, say)
	}
	// The host cancels 2, which frees its place in the queue for 5; 6,
	// read after both, is refused: the bridge takes the host's messages in
	// order.
	host.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`, echoLine("5"), echoLine("6"))
	if r := host.next(); string(r.ID) != "6" || r.Error == nil || string(r.Error.Data) != `{"reason":"too_many_calls"}` {
		t.Errorf("next line: %s, want the answer to 6: -32603 too_many_calls", r.text)
	}
	close(release)
	ids, got := host.answers("5")
	if strings.Join(ids, " ") != "1 3 5" || got["1"][0].Error != nil || got["3"][0].Error != nil || got["5"][0].Error != nil {
		t.Errorf("answers %v: %v, want 1, 3 and 5, echoed", ids, got)
	}
	mu.Lock()
	if fmt.Sprint(ran) != "[1 3 5]" {
		t.Errorf("the server ran %v, want [1 3 5]", ran)
	}
	mu.Unlock()
}
