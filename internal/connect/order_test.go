package connect_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/demo"
)

// initializedDelay is how long the server below takes to take the host's
// notifications/initialized: a call the bridge sent without waiting for it
// arrives meanwhile.
const initializedDelay = 300 * time.Millisecond

// TestCallWaitsForInitialized: the host writes initialize, then
// notifications/initialized and a tools/call at once, in that order (MCP
// 2025-11-25, "Lifecycle": the notification opens normal operation). The
// bridge sends the call only once the server took the notification, so a
// server that refuses calls before it (here: a tools/call that arrives
// while the notification is still being taken) answers the call; the
// conformance suite's sse-retry server, which counts the first GET after a
// call as the call's resume, relies on the same order.
func TestCallWaitsForInitialized(t *testing.T) {
	server := demo.NewServer()
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)})
	// strict refuses a call that arrives before the notification was
	// taken, as a server that holds calls to the lifecycle's order does.
	var taken atomic.Bool
	strict := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			switch {
			case bytes.Contains(body, []byte(`"notifications/initialized"`)):
				time.Sleep(initializedDelay)
				taken.Store(true) // before the 202 can reach the bridge
			case bytes.Contains(body, []byte(`"tools/call"`)) && !taken.Load():
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"tools/call before notifications/initialized"}}`)
				return
			}
		}
		sdk.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(strict)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
	}()

	toBridge, hostOut := io.Pipe()
	fromBridge, bridgeOut := io.Pipe()
	conn, err := (&mcp.IOTransport{Reader: toBridge, Writer: bridgeOut}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- connect.Run(context.Background(), conn, connect.Options{URL: srv.URL, Logger: slog.New(slog.DiscardHandler)})
		conn.Close()
	}()
	in := make(chan jsonrpc.Message, 64)
	go func() {
		defer close(in)
		sc := bufio.NewScanner(fromBridge)
		for sc.Scan() {
			if m, err := jsonrpc.DecodeMessage(sc.Bytes()); err == nil {
				in <- m
			}
		}
	}()
	send := func(lines ...string) {
		t.Helper()
		if _, err := io.WriteString(hostOut, strings.Join(lines, "\n")+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(id int) *jsonrpc.Response {
		t.Helper()
		want, _ := jsonrpc.MakeID(float64(id))
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-in:
				if r, ok := m.(*jsonrpc.Response); ok && r.ID == want {
					return r
				}
			case <-timeout:
				t.Fatalf("no answer to %d within 10s", id)
			}
		}
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"host","version":"1"}}}`)
	if r := answer(1); r.Error != nil {
		t.Fatalf("initialize: %v", r.Error)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"in order"}}}`)
	r := answer(2)
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || len(res.Content) != 1 || res.Content[0].Text != "in order" {
		t.Errorf("the call sent right after notifications/initialized: result %s, error %v; want the echo %q", r.Result, r.Error, "in order")
	}

	hostOut.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still runs 10s after the host closed its end")
	}
	bridgeOut.Close()
	for range in {
	}
}
