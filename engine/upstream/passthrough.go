// This file holds the pass-through of the sessionless era: requests of
// protocol 2026-07-28 go to the upstream as they are, and its
// answers come back as they are.

package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/via"
	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
)

// maxIDPeek bounds how much of a passed-through body is kept to find the
// request ID an error answer names.
const maxIDPeek = 64 << 10

// Sessionless returns the handler of the sessionless era (requests whose
// MCP-Protocol-Version is 2026-07-28; transport.Options.Sessionless):
// each request goes to the upstream URL with its method and body, and with
// these headers only: Content-Type, Accept, MCP-Protocol-Version and every
// other Mcp-* header but Mcp-Session-Id (that era has no sessions), the
// Options.Forward headers, Options.Header, and Via with this process's
// entry appended (package via: a loop back here is refused 508). The upstream's status,
// headers and body come back as they are, each SSE event flushed as it
// arrives. Tidemark keeps nothing of these requests: no session, no event
// log, no cursor. When the upstream cannot be reached the answer is 503
// with Retry-After: 1 and a JSON-RPC error whose error.data.reason is
// upstream_unreachable.
func (e *Engine) Sessionless() http.Handler {
	target, _ := url.Parse(e.url) // New checked it
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: target.Scheme, Host: target.Host, Path: target.Path, RawQuery: target.RawQuery}
			pr.Out.Host = ""
			pr.Out.Header = e.sessionlessHeader(pr.In.Header)
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				pr.Out.Body = newPeekBody(pr.Out.Body)
			}
		},
		Transport:     e.http.Transport,
		FlushInterval: -1,
		ErrorHandler:  e.sessionlessError,
		// What the proxy reports on its own (an upstream answer cut
		// mid-body) goes to the engine's log, not to the standard
		// logger's unstructured stderr.
		ErrorLog: slog.NewLogLogger(e.opts.Logger.Handler(), slog.LevelWarn),
	}
}

// sessionlessHeader returns the headers a sessionless request carries
// upstream.
func (e *Engine) sessionlessHeader(in http.Header) http.Header {
	out := make(http.Header)
	for name, vs := range in {
		keep := name == "Content-Type" || name == "Accept" ||
			(strings.HasPrefix(name, "Mcp-") && name != wire.HeaderSession)
		if keep {
			out[name] = append([]string(nil), vs...)
		}
	}
	for _, name := range e.forward {
		if vs := in.Values(name); len(vs) > 0 {
			out[name] = append([]string(nil), vs...)
		}
	}
	for name, vs := range e.opts.Header {
		out[http.CanonicalHeaderKey(name)] = append([]string(nil), vs...)
	}
	via.Append(out, in)
	return out
}

// sessionlessError answers a sessionless request the upstream did not
// answer: 503, Retry-After 1, and a JSON-RPC error naming the request's
// ID when its body had one.
func (e *Engine) sessionlessError(w http.ResponseWriter, r *http.Request, err error) {
	var id jsonrpc.ID
	if peek, ok := r.Body.(*peekBody); ok {
		if m, derr := jsonrpc.DecodeMessage(bytes.TrimSpace(peek.head)); derr == nil {
			if req, ok := m.(*jsonrpc.Request); ok {
				id = req.ID
			}
		}
	}
	e.opts.Logger.Warn("request refused", "status", http.StatusServiceUnavailable,
		"reason", replay.ReasonUpstreamUnreachable, "error", err)
	data, _ := json.Marshal(map[string]any{"reason": replay.ReasonUpstreamUnreachable})
	body, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
		Code:    -32000,
		Message: "the upstream MCP server could not be reached: " + err.Error() + "; retry later",
		Data:    data,
	}})
	w.Header().Set("Content-Type", wire.MediaJSON)
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(body)
}

// peekBody is a request body whose first bytes (at most maxIDPeek) are
// read before the request is passed on, so that an error answer can name
// the request's ID.
type peekBody struct {
	io.Reader
	io.Closer
	head []byte
}

func newPeekBody(body io.ReadCloser) *peekBody {
	head, err := io.ReadAll(io.LimitReader(body, maxIDPeek))
	rest := io.Reader(body)
	if err != nil {
		rest = errReader{err}
	}
	return &peekBody{Reader: io.MultiReader(bytes.NewReader(head), rest), Closer: body, head: head}
}

// errReader fails every Read with err: a body that failed while peeked
// fails where the upstream request reads it.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
