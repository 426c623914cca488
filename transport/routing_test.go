// routing_test.go tests that messages reach the stream of the request they
// relate to while many calls run at once.

package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
)

// TestRoutingUnderLoad runs 16 countdown calls at once on one session with
// an open standalone GET stream. Every POST stream must carry exactly its
// own call's messages (progress token and response id match), 20 progress
// events in order and the result; the GET stream carries nothing of any
// request.
func TestRoutingUnderLoad(t *testing.T) {
	const calls, steps = 16, 20
	ctx := testContext(t)
	st := newStack(t, nil, nil, nil)
	s := st.initialize(t, ctx, "")

	g, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	getEvents := make(chan []mcptest.Event, 1)
	getErr := make(chan error, 1)
	go func() {
		// Read until the barrier notification (see below) arrives.
		evs, err := g.Until(func(e mcptest.Event) bool {
			r, ok := e.Request()
			return ok && r.Method == "notifications/tools/list_changed"
		})
		getEvents <- evs
		getErr <- err
	}()

	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := int64(100 + i)
			// Half the calls use string progress tokens, half numbers.
			var tok any = fmt.Sprintf("tok-%d", i)
			if i%2 == 1 {
				tok = float64(1000 + i)
			}
			if err := checkCall(ctx, s, id, steps, tok); err != nil {
				errs <- fmt.Errorf("call %d: %w", id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// The calls ran together: their streams' events interleave in the log.
	logEvs, _, err := st.h.Registry().Log().Store().Read(ctx, s.Token, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	switches := 0
	for i := 1; i < len(logEvs); i++ {
		if logEvs[i].Stream != logEvs[i-1].Stream {
			switches++
		}
	}
	t.Logf("stream switches in the log: %d", switches)
	if min := calls * 2; switches < min {
		t.Fatalf("the log switches streams %d times, want at least %d: the calls did not run together", switches, min)
	}

	// A barrier: a server-wide notification goes to the standalone stream
	// after every event of the calls, so once it is read the GET stream has
	// been given everything it would ever get of them.
	mcp.AddTool(st.server, &mcp.Tool{Name: "barrier"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	evs, err := <-getEvents, <-getErr
	if err != nil {
		t.Fatalf("GET stream: %v after %v", err, evs)
	}
	if len(evs) != 2 || !evs[0].IsPriming() {
		t.Fatalf("GET stream carried %d events %v, want only its priming event and the barrier", len(evs), evs)
	}
}

// checkCall runs one countdown call and checks its stream without the
// testing.T (it runs in its own goroutine).
func checkCall(ctx context.Context, s *mcptest.Session, id int64, n int, tok any) error {
	// A 1 ms pause per step keeps all the calls in flight together.
	st, err := s.Call(ctx, mcptest.ToolCall(id, "countdown", map[string]any{"n": n, "delay_ms": 1}, tok))
	if err != nil {
		return err
	}
	defer st.Close()
	first, err := st.Next()
	if err != nil {
		return err
	}
	if !first.IsPriming() {
		return fmt.Errorf("first event %v is not a priming event", first.Event)
	}
	for step := 1; step <= n; step++ {
		e, err := st.Next()
		if err != nil {
			return fmt.Errorf("progress %d: %w", step, err)
		}
		r, ok := e.Request()
		if !ok || r.Method != "notifications/progress" {
			return fmt.Errorf("event %d: %v, want notifications/progress", step, e.Event)
		}
		var p mcp.ProgressNotificationParams
		if err := json.Unmarshal(r.Params, &p); err != nil {
			return err
		}
		if p.ProgressToken != tok || p.Progress != float64(step) || p.Total != float64(n) {
			return fmt.Errorf("event %d: progress token %v (%T) %v/%v, want token %v (%T) %d/%d",
				step, p.ProgressToken, p.ProgressToken, p.Progress, p.Total, tok, tok, step, n)
		}
	}
	e, err := st.Next()
	if err != nil {
		return fmt.Errorf("response: %w", err)
	}
	r, ok := e.Response()
	if !ok || r.ID != mcptest.ID(id) || r.Error != nil {
		return fmt.Errorf("event after progress: %v, want the result of %d", e.Event, id)
	}
	if want := fmt.Sprintf(`{"content":[{"type":"text","text":"countdown of %d finished"}]}`, n); string(r.Result) != want {
		return fmt.Errorf("result %s, want %s", r.Result, want)
	}
	if e, err := st.Next(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after the response: %v, %v; want the end of the stream", e.Event, err)
	}
	return nil
}
