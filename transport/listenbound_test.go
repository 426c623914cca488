// listenbound_test.go tests the bound on the 2026-07-28 subscriptions/listen
// streams open at once (Options.MaxListens), over real HTTP on loopback.

package transport_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestMaxListens: with MaxListens 2, two listen streams stream and a third
// listen is refused 503 capacity with Retry-After, its id, one WARN line
// and one count in tidemark_refusals_total, while the two go on hearing
// their notifications; once one ends, a new listen is accepted. The
// failing input (a hostile-client review): 300 unauthenticated listens
// took the process from 119 to 1,919 goroutines and from 63 to 96 MiB of
// RSS, bounded by file descriptors alone.
func TestMaxListens(t *testing.T) {
	ctx := testContext(t)
	server, _ := listenServer()
	reg := prometheus.NewRegistry()
	var logs testenv.LogBuffer
	logger := logs.Logger()
	st := newStack(t, server, &tidemark.Options{
		Transport:  transport.Options{MaxListens: 2, Logger: logger},
		Registerer: reg,
	}, nil)
	open := func() float64 {
		t.Helper()
		return promValue(t, reg, "tidemark_streams_open", map[string]string{"kind": "listen"})
	}
	refused := func() float64 {
		t.Helper()
		return promValue(t, reg, "tidemark_refusals_total", map[string]string{"status": "503", "reason": "capacity"})
	}

	first, firstBody, err := st.client.Listen(ctx, sessionlessListen(1, "demo://one"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	second, _, err := st.client.Listen(ctx, sessionlessListen(2, "demo://two"))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Body.Close()
	if got := open(); got != 2 {
		t.Fatalf("tidemark_streams_open{kind=listen} = %v with two listens open, want 2", got)
	}

	_, _, err = st.client.Listen(ctx, sessionlessListen(3, "demo://three"))
	se, ok := mcptest.AsStatusError(err)
	if !ok {
		t.Fatalf("the third listen: %v, want HTTP 503", err)
	}
	const want = `{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"no room for another subscriptions/listen stream: this server holds 2 open at most; listen again later","data":{"reason":"capacity"}}}`
	if se.Status != http.StatusServiceUnavailable || string(se.RawBody) != want {
		t.Fatalf("the third listen: HTTP %d %s\nwant HTTP 503 %s", se.Status, se.RawBody, want)
	}
	if ct, ra := se.Header.Get("Content-Type"), se.Header.Get("Retry-After"); ct != "application/json" || ra != "1" {
		t.Fatalf("the third listen's Content-Type %q, Retry-After %q; want application/json, 1", ct, ra)
	}
	if got := refused(); got != 1 {
		t.Fatalf("tidemark_refusals_total{status=503,reason=capacity} = %v, want 1", got)
	}
	if got := open(); got != 2 {
		t.Fatalf("tidemark_streams_open{kind=listen} = %v after the refusal, want 2", got)
	}
	const line = `level=WARN msg="request refused" status=503 reason=capacity detail="no room for another subscriptions/listen stream: this server holds 2 open at most; listen again later"` + "\n"
	if got := logs.String(); got != line {
		t.Fatalf("log:\n%s\nwant:\n%s", got, line)
	}

	// The streams open are unharmed: the first hears its update.
	server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "demo://one"})
	for {
		line, err := firstBody.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the first listen stream for its update: %v", err)
		}
		if strings.Contains(line, `"method":"notifications/resources/updated"`) && strings.Contains(line, `"uri":"demo://one"`) {
			break
		}
	}

	// One ends: its room is the next listen's.
	second.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); open() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("tidemark_streams_open{kind=listen} = %v 10 s after a listen ended, want 1", open())
		}
	}
	fourth, _, err := st.client.Listen(ctx, sessionlessListen(4, "demo://four"))
	if err != nil {
		t.Fatalf("a listen once one of the two ended: %v, want its stream", err)
	}
	defer fourth.Body.Close()
	if got := open(); got != 2 {
		t.Fatalf("tidemark_streams_open{kind=listen} = %v, want 2", got)
	}
	if got := refused(); got != 1 {
		t.Fatalf("tidemark_refusals_total{status=503,reason=capacity} = %v at the end, want 1", got)
	}
}

// promValue returns the value of the gauge or counter name whose labels
// are labels in reg; 0 when it has no such series yet.
func promValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue series
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestListenParamsBound: a subscriptions/listen may name at most
// engine.MaxSubscriptions resource URIs, and its params may take at most
// engine.MaxListenParams bytes; past either it is refused with its id (400
// invalid_params, 413 body_too_large) before it takes a place among the
// listens open, so a full server still says what is wrong with it. The
// failing input (a newcomer's review): one listen of about 150,000 URIs in
// a 4 MB body held 50 to 65 MB for its life, and twenty took RSS to 1.17 GB
// against a soft memory limit of 820 MB.
func TestListenParamsBound(t *testing.T) {
	ctx := testContext(t)
	server, _ := listenServer()
	st := newStack(t, server, &tidemark.Options{Transport: transport.Options{MaxListens: 1}}, nil)
	uris := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("demo://r%03d", i))
		}
		return out
	}
	listen := func(id int64, uris []string, meta map[string]any) []byte {
		return mcptest.SessionlessBody(id, "subscriptions/listen",
			map[string]any{"notifications": map[string]any{"resourceSubscriptions": uris}}, meta)
	}

	open, _, err := st.client.Listen(ctx, listen(1, uris(engine.MaxSubscriptions), nil))
	if err != nil {
		t.Fatalf("a listen of %d URIs: %v, want its stream", engine.MaxSubscriptions, err)
	}
	defer open.Body.Close()

	cases := []struct {
		name   string
		body   []byte
		status int
		want   string
	}{
		{"65 URIs", listen(2, uris(engine.MaxSubscriptions+1), nil), http.StatusBadRequest,
			`{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"engine: session state bound: subscriptions/listen names 65 resource URIs of 715 bytes, over the bound of 64 URIs and 16384 bytes a stream may hold: a listen stream keeps them for its life (listen to fewer resources, or open more streams)","data":{"reason":"invalid_params"}}}`},
		{"params over 32 KiB", listen(3, uris(1), map[string]any{"pad": strings.Repeat("x", engine.MaxListenParams)}), http.StatusRequestEntityTooLarge,
			`{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"engine: session state bound: subscriptions/listen params of 33012 bytes exceed 32768 bytes: a listen stream keeps them for its life (listen to fewer resources, or open more streams)","data":{"reason":"body_too_large"}}}`},
	}
	for _, tc := range cases {
		_, _, err := st.client.Listen(ctx, tc.body)
		se, ok := mcptest.AsStatusError(err)
		if !ok {
			t.Fatalf("%s: %v, want HTTP %d", tc.name, err, tc.status)
		}
		if se.Status != tc.status || string(se.RawBody) != tc.want {
			t.Errorf("%s: HTTP %d %s\nwant HTTP %d %s", tc.name, se.Status, se.RawBody, tc.status, tc.want)
		}
	}
}
