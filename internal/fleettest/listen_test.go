package fleettest_test

// The fleet's fan-out of subscriptions/listen notifications (protocol
// 2026-07-28) across real `tidemark serve --redis` replicas.

import (
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/listentest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
)

// sessionless connects a go-sdk client at its default revision
// (2026-07-28) to url with opts, and checks what it negotiated.
func sessionless(t *testing.T, url string, c *mcp.Client) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	cs, err := c.Connect(testCtx(t, 30*time.Second), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != "2026-07-28" {
		t.Fatalf("negotiated %s, want 2026-07-28", got)
	}
	return cs
}

// notify calls the demo's notify tool through cs and checks its answer.
func notify(t *testing.T, cs *mcp.ClientSession, method, uri, want string) {
	t.Helper()
	res, err := cs.CallTool(testCtx(t, 30*time.Second), &mcp.CallToolParams{
		Name: "notify", Arguments: demo.NotifyArgs{Method: method, URI: uri},
	})
	if err != nil {
		t.Fatalf("notify %s: %v", method, err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != want || res.IsError {
		t.Fatalf("notify %s: %q (isError %v), want %q", method, got, res.IsError, want)
	}
}

// TestListenAcrossReplicas: a client holding subscriptions/listen streams
// on replica r1 (tools list changes, and updates of the demo's readme)
// receives exactly once a resource update raised by a tool call sent to
// r0 and a tools list change raised on r2; an update of a URI it did not
// subscribe to and a prompts list change it did not ask for do not reach
// it. A listener on r2, the replica that raised the list change, hears it
// once too.
func TestListenAcrossReplicas(t *testing.T) {
	f := newFleet(t, 3, redistest.Options{})
	listeners := make([]*listentest.Recorder, 3)
	for _, i := range []int{1, 2} {
		rec := listentest.New()
		c := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1.0.0"}, rec.Options())
		rec.Watch(c)
		cs := sessionless(t, f.r[i].url, c)
		if err := cs.Subscribe(testCtx(t, 30*time.Second), &mcp.SubscribeParams{URI: demo.ReadmeURI}); err != nil {
			t.Fatalf("listen on %s: %v", f.r[i].id, err)
		}
		rec.WaitFor(t, listentest.Acknowledged, 2, 30*time.Second)
		listeners[i] = rec
	}
	caller := func(i int) *mcp.ClientSession {
		return sessionless(t, f.r[i].url, mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1.0.0"}, nil))
	}
	onA, onC := caller(0), caller(2)
	notify(t, onA, listentest.ResourceUpdated, demo.ReadmeURI, "notified notifications/resources/updated "+demo.ReadmeURI)
	notify(t, onA, listentest.ResourceUpdated, "demo://elsewhere", "notified notifications/resources/updated demo://elsewhere")
	notify(t, onC, listentest.ToolsChanged, "", "notified notifications/tools/list_changed")
	notify(t, onC, listentest.PromptsChanged, "", "notified notifications/prompts/list_changed")

	want := map[string]int{
		listentest.Key(listentest.ResourceUpdated, demo.ReadmeURI): 1,
		listentest.ToolsChanged: 1,
	}
	listeners[1].Exactly(t, want, 30*time.Second)
	listeners[2].Exactly(t, want, 30*time.Second)
}
