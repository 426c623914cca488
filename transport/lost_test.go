// lost_test.go tests the answer to calls whose stream's events a real
// redis-server, killed under them, never stored.

package transport_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// countingEngine answers every call at once, and counts the calls other
// than initialize it was handed: each is a side effect.
type countingEngine struct{ runs *atomic.Int64 }

func (e countingEngine) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	return &countingSession{answerSession: answerSession{out: out, done: make(chan struct{})}, runs: e.runs}, nil
}

type countingSession struct {
	answerSession
	runs *atomic.Int64
}

func (s *countingSession) Deliver(ctx context.Context, msg jsonrpc.Message, req engine.Request) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() && r.Method != "initialize" {
		s.runs.Add(1)
	}
	return s.answerSession.Deliver(ctx, msg, req)
}

// TestCallRanStoreLost: Redis dies (SIGKILL) between a session's
// initialize and its next call. The process does not know yet: the call's
// opening event is pipelined, the call is handed to the engine and runs,
// and only then does the store fail it. The call is answered 200 with a
// JSON-RPC error (-32603, generation_lost) saying it may have run, on the
// SSE stream (an event without an id) or as the JSON body; never 503
// "retry the request", which made a retrying client run it twice.
func TestCallRanStoreLost(t *testing.T) {
	testenv.NeedRedis(t)
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "sse", true: "json"}[asJSON], func(t *testing.T) {
			runs, answer := callOnKilledRedis(t, asJSON)
			if answer.ID != mcptest.ID(2) {
				t.Errorf("answer to id %v, want 2", answer.ID.Raw())
			}
			var werr *jsonrpc.Error
			if !errors.As(answer.Error, &werr) || werr.Code != jsonrpc.CodeInternalError ||
				werr.Message != "the call was handed to the server, but the session's store could not keep its stream, so its answer is lost and it may have run: check its effect before sending it again; the session's next request continues at a new generation" ||
				string(werr.Data) != `{"generation":1,"reason":"generation_lost"}` {
				t.Errorf("error %+v; want -32603 generation_lost at generation 1 with the message", answer.Error)
			}
			if runs != 1 {
				t.Errorf("the call ran %d times, want 1", runs)
			}
		})
	}
}

// callOnKilledRedis serves a counting engine on a real redis-server
// (JSON answers when asJSON), initializes a session, kills Redis, sends
// call 2 and returns how many calls the engine ran and the one answer,
// failing the test unless it came with status 200 (as an SSE event
// without an id, or the JSON body).
func callOnKilledRedis(t *testing.T, asJSON bool) (int64, *jsonrpc.Response) {
	ctx := testContext(t)
	srv := redistest.Start(t, redistest.Options{})
	st, err := redis.New(ctx, redis.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	quiet := slog.New(slog.DiscardHandler)
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), countingEngine{runs: &runs}, session.Options{Logger: quiet})
	hs := httptest.NewServer(transport.New(reg, transport.Options{Logger: quiet, JSONResponse: asJSON}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		reg.Close()
		st.Close()
	})
	s, err := (&mcptest.Client{URL: hs.URL, HTTP: hs.Client()}).Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()

	resp, err := s.Post(ctx, mcptest.MustCall(2, "ping", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("the call: HTTP %d %s; want 200 and its error", resp.StatusCode, body)
	}
	var msg jsonrpc.Message
	if asJSON {
		body, _ := io.ReadAll(resp.Body)
		if msg, err = jsonrpc.DecodeMessage(body); err != nil {
			t.Fatalf("body %s: %v", body, err)
		}
	} else {
		str, err := mcptest.OpenStream(resp)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := str.Collect()
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].HasID {
			t.Fatalf("events %v; want one, without an id", evs)
		}
		msg = evs[0].Message
	}
	answer, ok := msg.(*jsonrpc.Response)
	if !ok {
		t.Fatalf("message %v; want a response", msg)
	}
	return runs.Load(), answer
}
