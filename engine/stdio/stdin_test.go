package stdio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
)

// TestQueuedCallAnsweredOnceAtExit: a call waiting for room in the queue
// of a subprocess that stopped reading its stdin (one line read, a 1 MiB
// call filling the pipe, 64 notifications filling the queue) when the
// subprocess exits is answered once: by the end of the subprocess, with
// server_exited, as the other calls it left in flight; Deliver reports it
// handed over (nil), so that no refusal answers it a second time.
func TestQueuedCallAnsweredOnceAtExit(t *testing.T) {
	exit := filepath.Join(t.TempDir(), "exit")
	e := testEngine(t, nil, Options{Env: []string{roleEnv + "=oneline", exitFileEnv + "=" + exit}})
	s, out := startSession(t, e, 1, nil, nil)
	deliver(t, s, toolCall(t, 1, "read", map[string]any{}, nil))
	deliver(t, s, toolCall(t, 2, "big", map[string]any{"text": strings.Repeat("x", 1<<20)}, nil))
	for range cap(s.(*proc).lines) {
		deliver(t, s, &jsonrpc.Request{Method: "notifications/roots/list_changed"})
	}
	delivered := make(chan error, 1)
	go func() {
		delivered <- s.Deliver(t.Context(), toolCall(t, 3, "queued", map[string]any{}, nil), engine.Request{})
	}()
	select {
	case err := <-delivered:
		t.Fatalf("Deliver of call 3 returned %v with the queue full, want it to wait for room", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(exit, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-delivered:
		if err != nil {
			t.Errorf("Deliver of call 3 as the subprocess exited: %v, want nil: the end of the subprocess answers it", err)
		}
	case <-time.After(wait):
		t.Fatalf("Deliver of call 3 did not return within %v of the exit", wait)
	}
	<-s.Done()
	answers := map[string]string{}
	for range 3 {
		m := out.next(t)
		r, ok := m.msg.(*jsonrpc.Response)
		var we *jsonrpc.Error
		if !ok || !errors.As(r.Error, &we) || r.ID != m.related {
			t.Fatalf("got %s related %v, want an error response related to its call", encode(t, m.msg), m.related.Raw())
		}
		key := fmt.Sprint(r.ID.Raw())
		if _, dup := answers[key]; dup {
			t.Errorf("call %s answered twice", key)
		}
		answers[key] = fmt.Sprintf("%d %s %s", we.Code, we.Data, we.Message)
	}
	out.none(t, 200*time.Millisecond)
	want := `-32603 {"generation":1,"reason":"server_exited"} the MCP server process of this session exited (exit status 3) ` +
		`before answering; the session's next request starts a new one at generation 2`
	for _, callID := range []string{"1", "2", "3"} {
		if answers[callID] != want {
			t.Errorf("call %s: answer %q, want %q", callID, answers[callID], want)
		}
	}
}
