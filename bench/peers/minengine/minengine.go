// Package minengine is a benchmark-only Tidemark engine that answers MCP
// directly, without any SDK server: initialize, ping, tools/list,
// notifications (cancelled is honoured) and tools/call of the countdown tool
// with the same behaviour as internal/demo's (one notifications/progress per
// step when the call carries a progress token, then the text "countdown of N
// finished"). Served through Tidemark's session registry and transport, it
// measures what Tidemark's transport costs on its own (BENCHMARKS.md,
// "Goals": transport cost). It is not a general MCP server: it knows one
// tool and no other capability.
package minengine

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/segmentio/encoding/json"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/transport"
)

// MaxCountdownSteps bounds countdown's n, as internal/demo does.
const MaxCountdownSteps = 1_000_000

// latestVersion is the protocol version answered when the client asks for
// one this engine does not know (MCP 2025-11-25, lifecycle, "Version
// Negotiation").
const latestVersion = "2025-11-25"

// JSON-RPC error codes used here (JSON-RPC 2.0, section 5.1).
const (
	codeInvalidParams  = -32602
	codeMethodNotFound = -32601
)

// Engine is the minimal engine. The zero value is ready to use.
type Engine struct{}

var _ engine.Engine = Engine{}

// Start implements engine.Engine. A re-created session (info.State set)
// needs nothing restored: the engine keeps no per-session state besides
// the calls in flight.
func (Engine) Start(ctx context.Context, info engine.Info, out engine.Outbox) (engine.Session, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &minSession{out: out, ctx: sctx, cancel: cancel, done: make(chan struct{}), calls: make(map[jsonrpc.ID]context.CancelFunc)}, nil
}

type minSession struct {
	out    engine.Outbox
	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}

	mu    sync.Mutex
	calls map[jsonrpc.ID]context.CancelFunc // tools/call in flight
}

func (s *minSession) Done() <-chan struct{} { return s.done }

func (s *minSession) Close() error {
	s.once.Do(func() {
		s.cancel()
		close(s.done)
	})
	return nil
}

// Deliver implements engine.Session. Calls are answered from their own
// goroutine, so Deliver never waits for a tool to run.
func (s *minSession) Deliver(ctx context.Context, msg jsonrpc.Message, req engine.Request) error {
	select {
	case <-s.done:
		return engine.ErrClosed
	default:
	}
	r, ok := msg.(*jsonrpc.Request)
	if !ok {
		return nil // responses: this engine sends no requests
	}
	if !r.IsCall() {
		if r.Method == "notifications/cancelled" {
			var p struct {
				RequestID any `json:"requestId"`
			}
			if json.Unmarshal(r.Params, &p) == nil {
				if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
					s.mu.Lock()
					if c := s.calls[id]; c != nil {
						c()
					}
					s.mu.Unlock()
				}
			}
		}
		return nil
	}
	// Calls that never wait (everything but a countdown with a delay or
	// progress notifications) are answered here, before Deliver returns,
	// as an SDK that runs its handlers on the request's goroutine does:
	// the answer is in the log when the POST's stream starts.
	switch r.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(r.Params, &p)
		v := p.ProtocolVersion
		switch v {
		case "2025-03-26", "2025-06-18", "2025-11-25":
		default:
			v = latestVersion
		}
		s.reply(r.ID, []byte(`{"capabilities":{"tools":{}},"protocolVersion":"`+v+`","serverInfo":{"name":"tidemark-minengine","version":"1.0.0"}}`), nil)
	case "ping":
		s.reply(r.ID, []byte(`{}`), nil)
	case "tools/list":
		s.reply(r.ID, []byte(`{"tools":[{"name":"countdown","description":"Counts n steps, sending one progress notification per step, then returns.","inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"delay_ms":{"type":"integer"}},"required":["n"]}}]}`), nil)
	case "tools/call":
		var p callParams
		if err := json.Unmarshal(r.Params, &p); err != nil {
			s.reply(r.ID, nil, &jsonrpc.Error{Code: codeInvalidParams, Message: "tools/call params: " + err.Error()})
			return nil
		}
		if string(p.Meta.ProgressToken) == "null" {
			p.Meta.ProgressToken = nil
		}
		if p.Arguments.DelayMS == 0 && p.Meta.ProgressToken == nil && p.Arguments.N <= maxInlineSteps {
			s.call(s.ctx, r.ID, &p)
			return nil
		}
		ctx, cancel := context.WithCancel(s.ctx)
		s.mu.Lock()
		s.calls[r.ID] = cancel
		s.mu.Unlock()
		go func() {
			defer func() {
				s.mu.Lock()
				delete(s.calls, r.ID)
				s.mu.Unlock()
				cancel()
			}()
			s.call(ctx, r.ID, &p)
		}()
	default:
		s.reply(r.ID, nil, &jsonrpc.Error{Code: codeMethodNotFound, Message: "method not found: " + r.Method})
	}
	return nil
}

// maxInlineSteps is the largest countdown answered inside Deliver when it
// neither waits nor notifies: its steps are a loop of context checks.
const maxInlineSteps = 1000

func (s *minSession) reply(id jsonrpc.ID, result []byte, err *jsonrpc.Error) {
	resp := &jsonrpc.Response{ID: id, Result: result}
	if err != nil {
		resp.Error = err
	}
	s.out.Send(s.ctx, resp, id)
}

// callParams are the params of tools/call as countdown reads them.
type callParams struct {
	Name      string `json:"name"`
	Arguments struct {
		N       int `json:"n"`
		DelayMS int `json:"delay_ms"`
	} `json:"arguments"`
	Meta struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	} `json:"_meta"`
}

// call runs countdown with the decoded params p (a progress token of
// null already dropped): the result of a failure is a tool error
// (isError), as the go-sdk reports a tool handler's error.
func (s *minSession) call(ctx context.Context, id jsonrpc.ID, p *callParams) {
	if p.Name != "countdown" {
		s.reply(id, nil, &jsonrpc.Error{Code: codeInvalidParams, Message: "unknown tool " + strconv.Quote(p.Name)})
		return
	}
	n, delay := p.Arguments.N, p.Arguments.DelayMS
	if n < 1 || n > MaxCountdownSteps {
		s.reply(id, toolError(fmt.Sprintf("n must be between 1 and %d, got %d", MaxCountdownSteps, n)), nil)
		return
	}
	if delay < 0 || delay > 60000 {
		s.reply(id, toolError(fmt.Sprintf("delay_ms must be between 0 and 60000, got %d", delay)), nil)
		return
	}
	token := p.Meta.ProgressToken
	var buf []byte // a progress notification's params, rendered
	for step := 1; step <= n; step++ {
		if delay > 0 {
			t := time.NewTimer(time.Duration(delay) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				s.reply(id, toolError(ctx.Err().Error()), nil)
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			s.reply(id, toolError(ctx.Err().Error()), nil)
			return
		}
		if token == nil {
			continue
		}
		buf = appendProgress(buf[:0], token, step, n)
		// Send stores the event; the log keeps the bytes, so each
		// notification needs its own copy of the params.
		params := append([]byte(nil), buf...)
		if err := s.out.Send(ctx, &jsonrpc.Request{Method: "notifications/progress", Params: params}, id); err != nil {
			return // the session ended or was fenced: nobody can be answered
		}
	}
	s.reply(id, []byte(`{"content":[{"type":"text","text":"countdown of `+strconv.Itoa(n)+` finished"}]}`), nil)
}

// appendProgress renders the params of one progress notification as the
// go-sdk does (MCP 2025-11-25, utilities/progress).
func appendProgress(b []byte, token json.RawMessage, step, n int) []byte {
	b = append(b, `{"message":"step `...)
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `","progress":`...)
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, `,"progressToken":`...)
	b = append(b, token...)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '}')
}

func toolError(msg string) []byte {
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]string{"type": "text", "text": msg}}, "isError": true})
	return b
}

// Options configures NewHandler.
type Options struct {
	// Retention bounds each session's event log; see eventlog.Options.
	// Zero values select eventlog's defaults.
	Retention eventlog.Options
	// MaxSessions is the most live sessions (session.Options.MaxSessions).
	// Default 10,000.
	MaxSessions int
	// Logger receives the registry's and transport's lines. Default
	// slog.Default().
	Logger *slog.Logger
}

// Handler is Tidemark's transport over a memory store serving Engine.
type Handler struct {
	http.Handler
	reg    *session.Registry
	cancel context.CancelFunc
	done   chan struct{}
}

// NewHandler wires Engine into Tidemark's session registry and transport
// over a memory store, as tidemark.NewHandler does for an *mcp.Server.
// Call Close when done.
func NewHandler(opts Options) *Handler {
	st := memory.New(memory.Options{})
	log := eventlog.New(st, opts.Retention)
	reg := session.New(st, log, Engine{}, session.Options{MaxSessions: opts.MaxSessions, Logger: opts.Logger})
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handler{Handler: transport.New(reg, transport.Options{Logger: opts.Logger}), reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		reg.Run(ctx, 10*time.Second)
	}()
	return h
}

// Close stops the sweeper and ends every live session's engine state.
func (h *Handler) Close() error {
	h.cancel()
	<-h.done
	return h.reg.Close()
}
