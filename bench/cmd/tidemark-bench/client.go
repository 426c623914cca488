package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/sse"
)

// The load generator speaks MCP Streamable HTTP (MCP 2025-11-25,
// basic/transports) with raw HTTP requests and reads SSE with
// internal/sse; no SDK client is involved.

// requestedVersion is the protocol version the load generator asks for.
const requestedVersion = "2025-11-25"

// newTransport returns an HTTP transport for conns concurrent connections
// to one loopback server. Compression is off: SSE must arrive as written.
func newTransport(conns int) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns + 16,
		MaxIdleConnsPerHost:   conns + 16,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 60 * time.Second,
		WriteBufferSize:       16 << 10,
		ReadBufferSize:        64 << 10,
	}
}

// client is one MCP session as seen from the load generator.
type client struct {
	hc      *http.Client
	url     string
	session string // Mcp-Session-Id
	version string // negotiated protocol version
	// authorization is the Authorization header of every request
	// (server.authorization), or "".
	authorization string
	nextID        atomic.Int64
}

// event is one SSE event as received: cursor and data.
type event struct {
	id   string
	data []byte
}

// callResult is what one tools/call stream delivered.
type callResult struct {
	status    int
	progress  int     // progress notifications received in order (1, 2, …)
	disorder  int     // progress notifications out of order or repeated
	other     int     // events that are neither progress nor the response (priming excluded)
	primings  int     // events with an id and no data
	response  []byte  // the JSON-RPC response; nil if none arrived
	toolError bool    // the response is an error or a tool result with isError
	events    []event // every event with data, when recording
	firstID   string  // cursor of the first progress notification
	lastID    string  // cursor of the last event with an id
	elapsed   time.Duration
	errBody   []byte // the body of a non-200 answer
}

// newClient returns a client of a new session of s, which sends through
// hc.
func newClient(hc *http.Client, s *server) *client {
	return &client{hc: hc, url: s.url, authorization: s.authorization}
}

// over returns a client of the same session that sends through hc (a
// separate pool of connections).
func (c *client) over(hc *http.Client) *client {
	d := &client{hc: hc, url: c.url, session: c.session, version: c.version, authorization: c.authorization}
	d.nextID.Store(c.nextID.Load())
	return d
}

// post sends one JSON-RPC message body and returns the response.
func (c *client) post(ctx context.Context, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	if c.session != "" {
		h["Mcp-Session-Id"] = []string{c.session}
	}
	if c.version != "" {
		h["Mcp-Protocol-Version"] = []string{c.version}
	}
	if c.authorization != "" {
		h["Authorization"] = []string{c.authorization}
	}
	return c.hc.Do(req)
}

// initialize opens the session: initialize, then notifications/initialized.
func (c *client) initialize(ctx context.Context) error {
	body := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + requestedVersion +
		`","capabilities":{},"clientInfo":{"name":"tidemark-bench","version":"1.0.0"}}}`
	c.nextID.Store(1)
	resp, err := c.post(ctx, []byte(body))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	res := readCall(resp, 0, false)
	if res.status != http.StatusOK || res.response == nil {
		return fmt.Errorf("initialize: status %d: %s", res.status, trim(res.errBody))
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	c.version = jsonString(res.response, "protocolVersion")
	if c.version == "" {
		c.version = requestedVersion
	}
	resp, err = c.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notifications/initialized: status %d", resp.StatusCode)
	}
	return nil
}

// countdown calls the countdown tool with n steps; with a progress token
// when progress is set. record keeps every event.
func (c *client) countdown(ctx context.Context, n, delayMS int, progress, record bool) (callResult, error) {
	id := c.nextID.Add(1)
	var b []byte
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"tools/call","params":{"name":"countdown","arguments":{"n":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	if delayMS > 0 {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, int64(delayMS), 10)
	}
	b = append(b, '}')
	if progress {
		b = append(b, `,"_meta":{"progressToken":"p`...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, `"}`...)
	}
	b = append(b, `}}`...)
	start := time.Now()
	resp, err := c.post(ctx, b)
	if err != nil {
		return callResult{}, err
	}
	res := readCall(resp, n, record)
	res.elapsed = time.Since(start)
	return res, nil
}

// resumeResult is what a GET with Last-Event-ID delivered.
type resumeResult struct {
	status int
	events []event   // events with data, at most the number asked for
	body   []byte    // the body of a non-SSE answer
	idle   bool      // the stream stayed open but sent nothing for the idle time
	last   time.Time // when the last of the wanted events (or the answer) arrived
	extra  int       // events with data after the wanted ones (drain)
}

// resume sends GET with Last-Event-ID and reads events until want events
// with data arrived (then closes the connection, unless drain is set: then
// it reads on to the end of the stream or idle, so the server finishes the
// request before the next one), the stream ends, no event came for idle, or
// ctx is done. err is set when no answer arrived.
func (c *client) resume(ctx context.Context, cursor string, want int, idle time.Duration, drain bool) (resumeResult, error) {
	var r resumeResult
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return r, err
	}
	req.Header["Accept"] = []string{"text/event-stream"}
	req.Header["Mcp-Session-Id"] = []string{c.session}
	req.Header["Mcp-Protocol-Version"] = []string{c.version}
	req.Header["Last-Event-Id"] = []string{cursor}
	if c.authorization != "" {
		req.Header["Authorization"] = []string{c.authorization}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	r.status, r.last = resp.StatusCode, time.Now()
	if resp.StatusCode != http.StatusOK || !isSSE(resp) {
		r.body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
		return r, nil
	}
	var fired atomic.Bool
	timer := time.AfterFunc(idle, func() { fired.Store(true); cancel() })
	defer timer.Stop()
	br := getReader(resp.Body)
	defer readers.Put(br)
	rd := sse.NewReader(br, 0)
	r.events = make([]event, 0, want)
	for len(r.events) < want {
		ev, err := rd.Next()
		if err != nil {
			r.idle = fired.Load()
			return r, nil
		}
		timer.Reset(idle)
		r.last = time.Now()
		if len(ev.Data) == 0 {
			continue // priming event
		}
		r.events = append(r.events, event{id: ev.ID, data: append([]byte(nil), ev.Data...)})
	}
	if drain {
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			timer.Reset(idle)
			if len(ev.Data) > 0 {
				r.extra++
			}
		}
	}
	return r, nil
}

// openStream opens the standalone GET stream and returns once the server
// answered with its status line and headers (the stream stays open until
// the returned body is closed).
func (c *client) openStream(ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header["Accept"] = []string{"text/event-stream"}
	req.Header["Mcp-Session-Id"] = []string{c.session}
	req.Header["Mcp-Protocol-Version"] = []string{c.version}
	if c.authorization != "" {
		req.Header["Authorization"] = []string{c.authorization}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("GET stream: status %d: %s", resp.StatusCode, trim(body))
	}
	return resp, nil
}

// readers pools 64 KiB buffered readers for sse.NewReader, which keeps a
// *bufio.Reader it is given when it is at least as large as its own read
// buffer instead of allocating one per stream, so the load generator's own
// garbage stays small.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func getReader(r io.Reader) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func isSSE(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// readCall reads the answer to one POST: an SSE stream up to and including
// the JSON-RPC response (then to its end, so the connection is reused), or
// one application/json body. n is the number of progress notifications
// expected (0: none).
func readCall(resp *http.Response, n int, record bool) callResult {
	defer resp.Body.Close()
	res := callResult{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		res.errBody, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
		return res
	}
	if !isSSE(resp) {
		body, _ := io.ReadAll(resp.Body)
		res.response = body
		res.toolError = isErrorResponse(body)
		return res
	}
	if record {
		res.events = make([]event, 0, n+2)
	}
	br := getReader(resp.Body)
	defer readers.Put(br)
	rd := sse.NewReader(br, 0)
	for {
		ev, err := rd.Next()
		if err != nil {
			return res
		}
		if ev.HasID {
			res.lastID = ev.ID
		}
		if len(ev.Data) == 0 {
			res.primings++
			continue
		}
		if record {
			res.events = append(res.events, event{id: ev.ID, data: append([]byte(nil), ev.Data...)})
		}
		if p, ok := progressOf(ev.Data); ok {
			if res.firstID == "" {
				res.firstID = ev.ID
			}
			if p == res.progress+1 {
				res.progress++
			} else {
				res.disorder++
			}
			continue
		}
		if res.response == nil && isResponse(ev.Data) {
			res.response = append([]byte(nil), ev.Data...)
			res.toolError = isErrorResponse(ev.Data)
			// Read on to the end of the stream so the connection can be
			// reused; servers close a POST stream after its response.
			continue
		}
		res.other++
	}
}

var (
	progressMethod = []byte(`"method":"notifications/progress"`)
	progressField  = []byte(`"progress":`)
)

// progressOf returns the progress value of a notifications/progress
// message. Every server here encodes JSON without spaces.
func progressOf(data []byte) (int, bool) {
	if !bytes.Contains(data, progressMethod) {
		return 0, false
	}
	i := bytes.Index(data, progressField)
	if i < 0 {
		return 0, false
	}
	v := 0
	j := i + len(progressField)
	for ; j < len(data) && data[j] >= '0' && data[j] <= '9'; j++ {
		v = v*10 + int(data[j]-'0')
	}
	return v, j > i+len(progressField)
}

func isResponse(data []byte) bool {
	return bytes.Contains(data, []byte(`"id":`)) &&
		(bytes.Contains(data, []byte(`"result":`)) || bytes.Contains(data, []byte(`"error":`))) &&
		!bytes.Contains(data, []byte(`"method":`))
}

func isErrorResponse(data []byte) bool {
	return bytes.Contains(data, []byte(`"error":{`)) || bytes.Contains(data, []byte(`"isError":true`))
}

// jsonString returns the string value of the first "key":"…" in data.
func jsonString(data []byte, key string) string {
	k := []byte(`"` + key + `":"`)
	i := bytes.Index(data, k)
	if i < 0 {
		return ""
	}
	rest := data[i+len(k):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// trim bounds a body for messages.
func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
