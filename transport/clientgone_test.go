// clientgone_test.go checks how a request whose client went away during
// its delivery is counted and logged.

package transport_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/transport"
)

// TestClientGoneDuringInitialize: an initialize whose client hung up
// before it was handed to the server is no refusal of the server's: it
// is not counted in the refusals (the 503 unavailable an alert pages on),
// and is logged at DEBUG with reason client_gone, not at WARN as a failed
// delivery.
func TestClientGoneDuringInitialize(t *testing.T) {
	counter := &refusalCounter{Recorder: metrics.Discard, counts: map[replay.Reason]int{}}
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The client's connection closing cancels its request's context
	// (net/http); the wrapper cancels it as the request arrives, so the
	// delivery meets it deterministically.
	hungUp := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context())
			cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	st := newStack(t, nil, &tidemark.Options{
		Metrics:   counter,
		Transport: transport.Options{Logger: logger},
		Sessions:  session.Options{Logger: logger},
	}, hungUp)
	ctx := testContext(t)
	// The engine may take the message before it notices the ended
	// context, so the delivery fails in some of the attempts only: no
	// attempt may be counted or logged as the server's failure, and at
	// least one must meet the ended context.
	for range 20 {
		st.client.Initialize(ctx, "") // fails, or answers when it won the race
	}
	if got := counter.snapshot(); len(got) != 0 {
		t.Errorf("refusals counted %v, want none: the client went away", got)
	}
	out := logs.String()
	if strings.Contains(out, "level=WARN") || !strings.Contains(out, "reason=client_gone") {
		t.Errorf("logs:\n%s\nwant no WARN line and a line with reason=client_gone", out)
	}
}
