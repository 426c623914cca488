package connect_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// oversizedGET answers the standalone GET stream in front of a Tidemark
// handler (which answers everything else): each GET waits for open, then
// sends a priming event and an event of over 64 KiB, unless it is a GET
// without Last-Event-ID after the first and again is false: then it
// sends notifications/tools/list_changed. It records each GET's
// Last-Event-ID.
type oversizedGET struct {
	next  http.Handler
	open  chan struct{}
	again bool

	mu   sync.Mutex
	gets []string
}

func (o *oversizedGET) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		o.next.ServeHTTP(w, r)
		return
	}
	select {
	case <-o.open:
	case <-r.Context().Done():
		return
	}
	o.mu.Lock()
	n := len(o.gets)
	leid := r.Header.Get("Last-Event-ID")
	o.gets = append(o.gets, leid)
	o.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "id: g%d-0\ndata:\n\n", n)
	if n > 0 && leid == "" && !o.again {
		fmt.Fprintf(w, "id: g%d-1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n", n)
	} else {
		fmt.Fprintf(w, "id: g%d-1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"%s\"}}\n\n", n, strings.Repeat("x", 70<<10))
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func (o *oversizedGET) lastEventIDs() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.gets...)
}

// TestOversizedStandaloneEvent: an SSE event over Options.MaxEventSize on the
// server's standalone GET stream is not resumed (a resume would get it
// again, for ever): the bridge opens a new standalone stream without
// Last-Event-ID, the host gets a notifications/message of level warning
// (it set the level warning) and a WARN line that say what was lost, the
// new stream's notification reaches the host, and calls go on. When the
// new stream begins with such an event too, no third stream is opened.
func TestOversizedStandaloneEvent(t *testing.T) {
	for _, again := range []bool{false, true} {
		t.Run(fmt.Sprintf("again=%v", again), func(t *testing.T) {
			h := newHandler()
			o := &oversizedGET{next: h, open: make(chan struct{}), again: again}
			srv := serveClosing(t, o, h)
			var logs testenv.LogBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			host := startRawHost(t, srv.URL, connect.Options{Protocol: connect.ProtocolStateful, MaxEventSize: 64 << 10,
				InitialBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, logger)
			host.send(rawInitialize)
			host.answers("6")
			host.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, `{"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{"level":"warning"}}`)
			host.answers("7")
			close(o.open)
			say := "the MCP server sent, on its standalone stream, an SSE event of more than 65536 bytes, more than tidemark connect reads in one event; the notification or request in it is lost: read your lists again if one may have changed; tidemark connect has opened a new standalone stream past it"
			want := []string{`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + say + `","level":"warning","logger":"tidemark connect"}}`}
			if again {
				closed := strings.TrimSuffix(say, "; tidemark connect has opened a new standalone stream past it") +
					"; the server sent such an event again at once, so tidemark connect gets no more notifications from the server for this session (calls go on)"
				want = append(want, `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"`+closed+`","level":"warning","logger":"tidemark connect"}}`)
			} else {
				want = append(want, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			}
			// The warning and the new stream's notification come from two
			// goroutines: their order is not part of the behaviour.
			got := make([]string, len(want))
			for i := range got {
				got[i] = host.next().text
			}
			slices.Sort(got)
			slices.Sort(want)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("lines to the host, sorted, %d: %.400s\nwant %.400s", i, got[i], want[i])
				}
			}
			host.send(echoLine("8"))
			if _, got := host.answers("8"); got["8"][0].Error != nil {
				t.Errorf("the call after: %s", got["8"][0].text)
			}
			time.Sleep(300 * time.Millisecond) // six times the longest backoff: a loop would GET again meanwhile
			if got := strings.Join(o.lastEventIDs(), ","); got != "," {
				t.Errorf("Last-Event-ID of the GETs: %q, want two GETs, neither with Last-Event-ID", got)
			}
			if out := logs.String(); !strings.Contains(out, "connect: "+strings.SplitN(say, ";", 2)[0]) {
				t.Errorf("no WARN line saying the event was lost:\n%s", out)
			}
		})
	}
}
