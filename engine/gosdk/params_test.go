package gosdk_test

// What the adapter holds of a call once it is answered.

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/internal/demo"
)

// answers is an engine.Outbox that drops the messages and reports each
// response's ID.
type answers chan jsonrpc.ID

func (a answers) Send(_ context.Context, msg jsonrpc.Message, _ jsonrpc.ID) error {
	if r, ok := msg.(*jsonrpc.Response); ok {
		a <- r.ID
	}
	return nil
}

// TestAnsweredCallParamsReleased: once a call is answered, the session no
// longer holds its params, however large, although the go-sdk (v1.8.0)
// keeps the request it handled last referenced until the session's next
// request (under 150 sessions each echoing 4 MiB, the memory held counts
// the answer, the session's newest event, and nothing of the request).
// Here 8 sessions each answer
// one echo of 512 KiB; afterwards the heap holds less than 2 MiB more than
// before (the params held were 4 MiB).
func TestAnsweredCallParamsReleased(t *testing.T) {
	ctx := context.Background()
	eng := gosdk.New(demo.NewServer())
	text := strings.Repeat("x", 512<<10)
	var sessions []engine.Session
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	var before runtime.MemStats
	runtime.GC()
	runtime.GC() // and what sync.Pools kept through the first
	runtime.ReadMemStats(&before)
	for i := range 8 {
		out := make(answers, 4)
		s, err := eng.Start(ctx, engine.Info{Token: "params-" + string(rune('a'+i)), Generation: 1}, out)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
		deliverCall(t, s, out, 1, "initialize", &mcp.InitializeParams{ProtocolVersion: "2025-11-25",
			ClientInfo: &mcp.Implementation{Name: "t", Version: "1"}, Capabilities: &mcp.ClientCapabilities{}})
		if err := s.Deliver(ctx, &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}, engine.Request{}); err != nil {
			t.Fatal(err)
		}
		deliverCall(t, s, out, 2, "tools/call", &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	}
	text = ""
	var after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 2<<20 {
		t.Fatalf("8 answered echoes of 512 KiB left the heap %d bytes larger, want under 2 MiB", grown)
	}
}

// deliverCall sends the call id method(params) to s and waits for its answer.
func deliverCall(t *testing.T, s engine.Session, out answers, id int64, method string, params any) {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	rid, _ := jsonrpc.MakeID(float64(id))
	if err := s.Deliver(context.Background(), &jsonrpc.Request{ID: rid, Method: method, Params: raw}, engine.Request{}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-out:
		if got != rid {
			t.Fatalf("%s: answer to %v, want %v", method, got, rid)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10s", method)
	}
}
