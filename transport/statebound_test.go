// statebound_test.go tests the bounds on what a session keeps of its
// client's input for its life (engine.State.Admit): the initialize params
// and the resources/subscribe URIs.

package transport_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// initializeOf returns the body of an initialize whose params take size
// bytes, the surplus in clientInfo.name.
func initializeOf(t *testing.T, size int) []byte {
	t.Helper()
	p := `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"","version":"1"}}`
	if size < len(p) {
		t.Fatalf("params of %d bytes cannot hold the required members", size)
	}
	p = strings.Replace(p, `"name":""`, `"name":"`+strings.Repeat("n", size-len(p))+`"`, 1)
	return []byte(`{"jsonrpc":"2.0","id":7,"method":"initialize","params":` + p + `}`)
}

// TestInitializeParamsBound: an initialize whose params are over
// engine.MaxInitializeParams bytes is refused 413 body_too_large with its
// id, before any session exists (none started, none live, no
// Mcp-Session-Id); one at the bound is served and its session lives.
func TestInitializeParamsBound(t *testing.T) {
	ctx := testContext(t)
	s := newInitStack(t, memory.New(memory.Options{}))
	post := func(size int) *http.Response {
		t.Helper()
		req, err := s.client.NewRequest(ctx, http.MethodPost, initializeOf(t, size))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	se := mcptest.ReadStatusError(post(engine.MaxInitializeParams + 1))
	checkRefusalID(t, se, http.StatusRequestEntityTooLarge, "body_too_large", "7")
	if tok := se.Header.Get("Mcp-Session-Id"); tok != "" {
		t.Errorf("the refused initialize names session %s", tok)
	}
	if started, _ := s.rec.counts(); started != 0 || s.reg.Len() != 0 {
		t.Fatalf("after the refused initialize: %d sessions started, %d live; want none", started, s.reg.Len())
	}

	resp := post(engine.MaxInitializeParams)
	msgs, err := mcptest.ReadAnswer(resp)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize at the bound: HTTP %d, session %q, %v", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), err)
	}
	if r, ok := msgs[len(msgs)-1].(*jsonrpc.Response); !ok || r.Error != nil {
		t.Fatalf("initialize at the bound answered %v, want a result", msgs[len(msgs)-1])
	}
	if started, _ := s.rec.counts(); started != 1 || s.reg.Len() != 1 {
		t.Fatalf("after the initialize at the bound: %d sessions started, %d live; want 1", started, s.reg.Len())
	}
}

// TestSubscriptionsBound: a session holds at most engine.MaxSubscriptions
// subscriptions; a resources/subscribe past them is refused 400
// invalid_params (-32602) with its id and reaches no engine, and once one
// is unsubscribed another subscribe is served again. Subscribing a URI
// held already adds nothing and is served at the bound.
func TestSubscriptionsBound(t *testing.T) {
	ctx := testContext(t)
	s := newInitStack(t, memory.New(memory.Options{}))
	sess, err := s.client.Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	call := func(id int64, method, uri string) *mcptest.StatusError {
		t.Helper()
		resp, err := sess.Post(ctx, mcptest.MustCall(id, method, map[string]string{"uri": uri}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			return mcptest.ReadStatusError(resp)
		}
		msgs, err := mcptest.ReadAnswer(resp)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := msgs[len(msgs)-1].(*jsonrpc.Response); !ok || r.Error != nil {
			t.Fatalf("%s %s answered %v, want a result", method, uri, msgs[len(msgs)-1])
		}
		return nil
	}
	uri := func(i int) string { return fmt.Sprintf("demo://r/%d", i) }
	for i := range engine.MaxSubscriptions {
		if se := call(int64(10+i), "resources/subscribe", uri(i)); se != nil {
			t.Fatalf("subscribe %d of %d refused: %v", i+1, engine.MaxSubscriptions, se)
		}
	}
	if se := call(100, "resources/subscribe", uri(0)); se != nil {
		t.Fatalf("subscribing a URI held already at the bound: %v", se)
	}
	se := call(101, "resources/subscribe", uri(engine.MaxSubscriptions))
	if se == nil {
		t.Fatalf("subscribe %d served, want refused", engine.MaxSubscriptions+1)
	}
	checkRefusalID(t, se, http.StatusBadRequest, "invalid_params", "101")
	if se.Body.Code != -32602 {
		t.Errorf("refusal code %d, want -32602", se.Body.Code)
	}
	live, err := s.reg.Get(ctx, sess.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(live.State().Subscriptions); n != engine.MaxSubscriptions {
		t.Errorf("session holds %d subscriptions, want %d", n, engine.MaxSubscriptions)
	}
	if se := call(102, "resources/unsubscribe", uri(3)); se != nil {
		t.Fatalf("unsubscribe: %v", se)
	}
	if se := call(103, "resources/subscribe", uri(engine.MaxSubscriptions)); se != nil {
		t.Fatalf("subscribe after an unsubscribe: %v", se)
	}
}
