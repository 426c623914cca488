// Package ceiling is the benchmark's upper bound: a bare net/http handler
// that writes the same SSE frames as Tidemark (priming event with retry,
// one event per progress notification, the response; cursors in Tidemark's
// format) for the countdown tool, without MCP: no SDK, no engine, no
// registry, no event log beyond a per-session list of rendered frames kept
// for Last-Event-ID replay. It validates nothing a benchmark does not send.
// Each event is written and flushed as it is produced, as a streaming SSE
// handler does.
package ceiling

import (
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tidemark-mcp/tidemark/replay"
)

// maxEvents bounds each session's kept frames (events); older frames are
// dropped in halves, as a retention limit would.
const maxEvents = 100_000

// Handler serves the ceiling. Create it with New.
type Handler struct {
	mu       sync.RWMutex
	sessions map[string]*session
}

// New returns an empty Handler.
func New() *Handler { return &Handler{sessions: make(map[string]*session)} }

type session struct {
	tag string

	mu         sync.Mutex
	nextStream uint64
	seq        uint64
	frames     []frame
}

type frame struct {
	stream uint64
	seq    uint64
	last   bool // the response that ends its stream
	b      []byte
}

// message is the part of a JSON-RPC request the ceiling reads.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProtocolVersion string `json:"protocolVersion"`
		Arguments       struct {
			N int `json:"n"`
		} `json:"arguments"`
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	} `json:"params"`
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodGet:
		h.get(w, r)
	case http.MethodDelete:
		h.mu.Lock()
		delete(h.sessions, r.Header.Get("Mcp-Session-Id"))
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (h *Handler) lookup(token string) *session {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.sessions[token]
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var m message
	if err != nil || json.Unmarshal(body, &m) != nil {
		http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`, http.StatusBadRequest)
		return
	}
	if m.ID == nil {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	var s *session
	if m.Method == "initialize" {
		token := rand.Text()
		s = &session{tag: replay.Tag(token), nextStream: 1}
		h.mu.Lock()
		h.sessions[token] = s
		h.mu.Unlock()
		w.Header().Set("Mcp-Session-Id", token)
	} else if s = h.lookup(r.Header.Get("Mcp-Session-Id")); s == nil {
		http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"session not found"}}`, http.StatusNotFound)
		return
	}
	sseHeaders(w)
	rc := http.NewResponseController(w)
	stream := s.openStream()
	write := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(s.add(stream, false, nil)) {
		return
	}
	var result []byte
	switch m.Method {
	case "initialize":
		v := m.Params.ProtocolVersion
		if v == "" {
			v = "2025-11-25"
		}
		result = []byte(`{"capabilities":{"tools":{}},"protocolVersion":"` + v + `","serverInfo":{"name":"ceiling","version":"1.0.0"}}`)
	case "tools/call":
		n := m.Params.Arguments.N
		token := m.Params.Meta.ProgressToken
		if len(token) > 0 && string(token) != "null" {
			msg := make([]byte, 0, 192)
			for step := 1; step <= n; step++ {
				msg = appendProgress(msg[:0], token, step, n)
				if !write(s.add(stream, false, msg)) {
					return
				}
			}
		}
		result = []byte(`{"content":[{"type":"text","text":"countdown of ` + strconv.Itoa(n) + ` finished"}]}`)
	default:
		result = []byte(`{}`)
	}
	resp := make([]byte, 0, 64+len(result)+len(m.ID))
	resp = append(resp, `{"jsonrpc":"2.0","id":`...)
	resp = append(resp, m.ID...)
	resp = append(resp, `,"result":`...)
	resp = append(resp, result...)
	resp = append(resp, '}')
	write(s.add(stream, true, resp))
}

// appendProgress renders one notifications/progress message.
func appendProgress(b []byte, token json.RawMessage, step, n int) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"message":"step `...)
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `","progress":`...)
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, `,"progressToken":`...)
	b = append(b, token...)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '}', '}')
}

func sseHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

func (s *session) openStream() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.nextStream
	s.nextStream++
	return st
}

// add renders one event of stream (a priming event when msg is nil), keeps
// it for replay and returns its frame.
func (s *session) add(stream uint64, last bool, msg []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	b := make([]byte, 0, len(msg)+80)
	b = append(b, "id: "...)
	b = replay.Cursor{Tag: s.tag, Generation: 1, Stream: stream, Sequence: s.seq}.AppendText(b)
	if msg == nil {
		b = append(b, "\nretry: 1000\ndata:\n\n"...)
	} else {
		b = append(b, "\ndata: "...)
		b = append(b, msg...)
		b = append(b, '\n', '\n')
	}
	if len(s.frames) >= maxEvents {
		s.frames = append([]frame(nil), s.frames[len(s.frames)/2:]...)
	}
	s.frames = append(s.frames, frame{stream: stream, seq: s.seq, last: last, b: b})
	return b
}

// get serves the standalone stream (a priming event, then nothing until the
// client leaves) or, with Last-Event-ID, replays the cursor's stream.
func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	s := h.lookup(r.Header.Get("Mcp-Session-Id"))
	if s == nil {
		http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"session not found"}}`, http.StatusNotFound)
		return
	}
	cursor := r.Header.Get("Last-Event-ID")
	if cursor == "" {
		sseHeaders(w)
		w.Write(s.add(0, false, nil))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		return
	}
	stream, seq, ok := parseCursor(cursor)
	if !ok {
		http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"malformed cursor"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	var out [][]byte
	finished := false
	for _, f := range s.frames {
		if f.stream == stream && f.seq > seq {
			out = append(out, f.b)
			finished = finished || f.last
		}
	}
	s.mu.Unlock()
	sseHeaders(w)
	for _, b := range out {
		if _, err := w.Write(b); err != nil {
			return
		}
	}
	http.NewResponseController(w).Flush()
	if !finished {
		<-r.Context().Done()
	}
}

// parseCursor reads the stream and sequence of a cursor in Tidemark's
// format (tag-generation-stream-sequence).
func parseCursor(c string) (stream, seq uint64, ok bool) {
	parts := strings.Split(c, "-")
	if len(parts) != 4 {
		return 0, 0, false
	}
	st, err1 := strconv.ParseUint(parts[2], 10, 64)
	sq, err2 := strconv.ParseUint(parts[3], 10, 64)
	return st, sq, err1 == nil && err2 == nil
}
