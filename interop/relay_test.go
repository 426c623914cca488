package interop

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/sse"
)

// relay is an HTTP reverse proxy on loopback between a client under test
// and `tidemark serve`. It records every exchange (what the client asked,
// what the server answered), can cut one response stream right after a
// chosen progress notification, and holds requests while the server
// restarts, so that a client's reconnection reaches the new process rather
// than a refused port. Headers and bodies pass unchanged.
type relay struct {
	srv   *httptest.Server
	proxy *httputil.ReverseProxy
	start time.Time

	mu        sync.Mutex
	target    *url.URL      // the server's endpoint; nil while it restarts
	up        chan struct{} // closed while target is set
	exchanges []exchange
	progress  int           // progress notifications forwarded, all streams
	progCh    chan struct{} // closed and replaced at each one
	cutAfter  int           // cut the stream that forwards progress number cutAfter; 0: none
	cutDone   bool          // the relay cut a stream
	cutCursor string        // the SSE id of the event the cut came after, if it had one
	// cutPriming: once a stream is cut, also cut the next resumed stream
	// right after its first event; primingCut is that event's id.
	cutPriming bool
	primingCut string
	ids        map[string]int // SSE event ids forwarded, all streams, and how often
}

// exchange is one HTTP request the client made and the answer it got.
type exchange struct {
	At          time.Duration // when the request arrived, since the relay started
	Method      string        // GET, POST or DELETE
	Path        string        // URL path
	RPC         string        // JSON-RPC methods of a POST body, comma-separated ("response" for a response)
	Session     string        // Mcp-Session-Id sent
	Protocol    string        // MCP-Protocol-Version sent
	LastEventID string        // Last-Event-ID sent
	Version     string        // params.protocolVersion of an initialize
	Status      int           // HTTP status answered; 0 if none (yet)
	Reason      string        // error.data.reason of a refusal
	Cut         bool          // the relay cut this response stream
	Done        bool          // the exchange is over (answered, cut, or abandoned by either side)
}

// newRelay starts a relay with no server behind it: requests wait until
// setTarget.
func newRelay(t *testing.T) *relay {
	t.Helper()
	r := &relay{start: time.Now(), up: make(chan struct{}), progCh: make(chan struct{}), ids: map[string]int{}}
	transport := &http.Transport{}
	r.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			r.mu.Lock()
			target := r.target
			r.mu.Unlock()
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = pr.In.URL.Path, pr.In.URL.RawPath
			pr.Out.Host = pr.In.Host
		},
		Transport:     transport,
		FlushInterval: -1,
		// A stream that ends because the server died, or because the relay
		// cut it, is what the test arranged: not worth a log line.
		ErrorLog: log.New(io.Discard, "", 0),
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) {
			// The server died under this request: the client sees its
			// connection end, as it would without the relay.
			panic(http.ErrAbortHandler)
		},
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay: the client's exchanges:\n%s", r.log())
		}
		r.srv.CloseClientConnections()
		r.srv.Close()
		transport.CloseIdleConnections()
	})
	return r
}

// URL returns the MCP endpoint clients use.
func (r *relay) URL() string { return r.srv.URL + "/mcp" }

// setTarget points the relay at a server's MCP endpoint and releases the
// requests that wait for one.
func (r *relay) setTarget(t *testing.T, endpoint string) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("relay: target %q: %v", endpoint, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.target == nil {
		close(r.up)
	}
	r.target = u
}

// hold makes new requests wait for the next setTarget.
func (r *relay) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.target != nil {
		r.target = nil
		r.up = make(chan struct{})
	}
}

// cutAt arranges for the stream that forwards the n-th progress
// notification (counted over all streams) to be cut right after it.
func (r *relay) cutAt(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cutAfter = n
}

// cutResumedPriming arranges for the first stream resumed after the cut
// that cutAt arranged to be cut too, right after its first event (a
// priming event).
func (r *relay) cutResumedPriming() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cutPriming = true
}

// primingCutAfter returns the SSE id of the event the relay cut a resumed
// stream after (cutResumedPriming), "" when it cut none.
func (r *relay) primingCutAfter() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primingCut
}

// repeatedIDs returns the SSE event ids the relay forwarded more than
// once, over all streams, with how often.
func (r *relay) repeatedIDs() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for id, n := range r.ids {
		if n > 1 {
			out[id] = n
		}
	}
	return out
}

// didCut reports whether the relay cut a stream.
func (r *relay) didCut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cutDone
}

// cut returns the SSE id of the event the relay cut a stream after, ""
// when it cut none or that event had no id.
func (r *relay) cut() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cutCursor
}

// waitProgress waits until the relay has forwarded n progress
// notifications in all; it calls t.Fatal after timeout.
func (r *relay) waitProgress(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		got, ch := r.progress, r.progCh
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("relay: %d progress notifications within %v, want %d", got, timeout, n)
		}
	}
}

// waitFor waits until the recorded exchanges satisfy done; it calls
// t.Fatal, naming what, after timeout.
func (r *relay) waitFor(t *testing.T, what string, timeout time.Duration, done func([]exchange) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done(r.recorded()) {
		if time.Now().After(deadline) {
			t.Fatalf("relay: no %s within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorded returns the exchanges so far, in the order the client made
// them; one still open has Status 0 until it ends.
func (r *relay) recorded() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.exchanges...)
}

// log renders the exchanges, one per line; a failed test logs them.
func (r *relay) log() string {
	var b strings.Builder
	for _, e := range r.recorded() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func (e exchange) String() string {
	s := e.At.Round(time.Millisecond).String() + " " + e.Method
	if e.Path != "/mcp" {
		s += " " + e.Path
	}
	if e.RPC != "" {
		s += " " + e.RPC
	}
	if e.LastEventID != "" {
		s += " Last-Event-ID=" + e.LastEventID
	}
	if e.Protocol != "" {
		s += " protocol=" + e.Protocol
	}
	if e.Session != "" {
		s += " session=" + e.Session
	}
	switch {
	case e.Status == 0 && !e.Done:
		return s + " → (open)"
	case e.Status == 0:
		return s + " → no answer (the server died, or the client left)"
	}
	s += " → " + http.StatusText(e.Status)
	if e.Reason != "" {
		s += " " + e.Reason
	}
	if e.Cut {
		s += " (cut)"
	}
	return s
}

// where returns the exchanges that satisfy keep.
func where(xs []exchange, keep func(exchange) bool) []exchange {
	var out []exchange
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// isResume reports whether e is a GET resuming a stream.
func isResume(e exchange) bool { return e.Method == http.MethodGet && e.LastEventID != "" }

// serve records the request, waits for a server, and forwards.
func (r *relay) serve(w http.ResponseWriter, req *http.Request) {
	e := exchange{
		At:          time.Since(r.start),
		Method:      req.Method,
		Path:        req.URL.Path,
		Session:     req.Header.Get("Mcp-Session-Id"),
		Protocol:    req.Header.Get("Mcp-Protocol-Version"),
		LastEventID: req.Header.Get("Last-Event-ID"),
	}
	if req.Method == http.MethodPost {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		e.describeBody(body)
	}
	r.mu.Lock()
	up := r.up
	index := len(r.exchanges)
	r.exchanges = append(r.exchanges, e)
	r.mu.Unlock()
	select {
	case <-up:
	case <-req.Context().Done():
		r.mu.Lock()
		r.exchanges[index].Done = true
		r.mu.Unlock()
		return
	}
	rec := &recorder{ResponseWriter: w, relay: r, e: e, index: index}
	defer rec.finish()
	r.proxy.ServeHTTP(rec, req)
}

// describeBody fills the JSON-RPC fields of e from a POST body.
func (e *exchange) describeBody(body []byte) {
	msgs, err := mcptest.DecodeJSON(body)
	if err != nil {
		e.RPC = "(not JSON-RPC)"
		return
	}
	var methods []string
	for _, m := range msgs {
		var raw struct {
			Method string `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		b, _ := json.Marshal(m)
		if json.Unmarshal(b, &raw) != nil {
			continue
		}
		switch raw.Method {
		case "":
			methods = append(methods, "response")
		case "initialize":
			e.Version = raw.Params.ProtocolVersion
			fallthrough
		default:
			methods = append(methods, raw.Method)
		}
	}
	e.RPC = strings.Join(methods, ",")
}

// recorder is the ResponseWriter the proxy writes to: it notes the status,
// reads a refusal's reason, and counts (and cuts at) progress
// notifications in SSE bodies.
type recorder struct {
	http.ResponseWriter
	relay *relay
	e     exchange
	index int // of e in relay.exchanges
	done  bool

	status  int
	refusal bytes.Buffer // body of a non-2xx answer
	pending []byte       // SSE bytes after the last complete event
	events  int          // complete SSE events seen
	cut     bool
}

func (rc *recorder) WriteHeader(code int) {
	rc.status = code
	rc.ResponseWriter.WriteHeader(code)
}

// Write forwards p, unless the stream is to be cut within p: then it
// forwards the bytes up to the end of the cutting event and fails, which
// makes the proxy abort the response (the client sees its connection end
// mid-stream) and close the server's connection (the server sees its
// client gone).
func (rc *recorder) Write(p []byte) (int, error) {
	if rc.status == 0 {
		rc.status = http.StatusOK
	}
	if rc.status >= 300 {
		rc.refusal.Write(p)
		return rc.ResponseWriter.Write(p)
	}
	if rc.cut {
		return 0, errCut
	}
	forward := rc.scan(p)
	n, err := rc.ResponseWriter.Write(p[:forward])
	if err == nil && rc.cut {
		rc.Flush()
		err = errCut
	}
	return n, err
}

// errCut is what the recorder answers the proxy once it cut a stream.
var errCut = errors.New("relay: stream cut")

// Flush lets the proxy flush each SSE event as it arrives.
func (rc *recorder) Flush() { rc.ResponseWriter.(http.Flusher).Flush() }

// scan counts the progress notifications that end within p and returns how
// many bytes of p may be forwarded: all of them, or up to the end of the
// event at which the relay cuts. Events end at a blank line; the server
// writes "\n" line endings.
func (rc *recorder) scan(p []byte) int {
	prefix := len(rc.pending)
	buf := append(rc.pending, p...)
	start := 0
	for {
		i := bytes.Index(buf[start:], []byte("\n\n"))
		if i < 0 {
			break
		}
		end := start + i + 2
		event := buf[start:end]
		start = end
		rc.events++
		if rc.relay.noteEvent(rc.e, rc.events == 1, event) {
			rc.cut = true
			rc.pending = nil
			return end - prefix
		}
	}
	rc.pending = bytes.Clone(buf[start:])
	return len(p)
}

// noteEvent counts the id of one forwarded SSE event of exchange e (first:
// the first event of its response) and reports whether the stream is to be
// cut right after it: after the cutAfter-th progress notification, or
// after the first event of the first resume that follows that cut
// (cutResumedPriming).
func (r *relay) noteEvent(e exchange, first bool, event []byte) bool {
	ev, err := sse.NewReader(bytes.NewReader(event), 0).Next()
	r.mu.Lock()
	if err == nil && ev.ID != "" {
		r.ids[ev.ID]++
	}
	if r.cutPriming && r.cutDone && r.primingCut == "" && first && isResume(e) && err == nil {
		r.primingCut = ev.ID
		r.mu.Unlock()
		return true
	}
	r.mu.Unlock()
	if !bytes.Contains(event, []byte(`"method":"notifications/progress"`)) {
		return false
	}
	return r.noteProgress(event)
}

// noteProgress counts one forwarded progress notification and reports
// whether the stream carrying it is to be cut now.
func (r *relay) noteProgress(event []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress++
	close(r.progCh)
	r.progCh = make(chan struct{})
	if r.cutAfter == 0 || r.progress != r.cutAfter {
		return false
	}
	r.cutDone = true
	if ev, err := sse.NewReader(bytes.NewReader(event), 0).Next(); err == nil {
		r.cutCursor = ev.ID
	}
	return true
}

// finish records the answer once.
func (rc *recorder) finish() {
	if rc.done {
		return
	}
	rc.done = true
	e := rc.e
	e.Status, e.Cut, e.Done = rc.status, rc.cut, true
	if rc.status >= 300 {
		if eb, err := mcptest.ParseError(rc.refusal.Bytes()); err == nil {
			e.Reason = eb.Reason
		}
	}
	rc.relay.mu.Lock()
	rc.relay.exchanges[rc.index] = e
	rc.relay.mu.Unlock()
}
