// tools.go holds what taskrun learns of the tools from the engine itself:
// the idempotentHint of each tool's annotations (MCP, "Tool
// annotations"), which lets a task of it run again after its executor
// was lost (tasks.Rules.Reruns).

package taskrun

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// toolsRefresh is the least time between two tools/list sent to learn
// a tool's hints: a tool not listed does not cost a round trip per call.
const toolsRefresh = 10 * time.Second

// toolsPages bounds the pages of one tools/list walk.
const toolsPages = 20

// toolCache holds the idempotentHint of each listed tool.
type toolCache struct {
	mu      sync.Mutex
	hints   map[string]bool
	fetched time.Time
}

var toolsListID, _ = jsonrpc.MakeID("tidemark-tools")

// idempotent reports whether the engine lists tool name with
// idempotentHint true, asking it with tools/list (the client's headers
// and _meta without the tasks declaration) when the tool is not known
// and the last asking is older than toolsRefresh.
func (h *Handler) idempotent(r *http.Request, params wire.Object, name string) bool {
	c := h.tools
	c.mu.Lock()
	hint, known := c.hints[name]
	stale := h.opts.Now().Sub(c.fetched) >= toolsRefresh
	if !known && stale {
		c.fetched = h.opts.Now()
	}
	c.mu.Unlock()
	if known || !stale {
		return hint
	}
	hints := map[string]bool{}
	cursor := ""
	for range toolsPages {
		p := wire.Object{}
		if meta := withoutDeclaration(params); meta != nil {
			p["_meta"] = mustJSON(meta)
		}
		if cursor != "" {
			p["cursor"] = mustJSON(cursor)
		}
		body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: toolsListID, Method: "tools/list", Params: mustJSON(p)})
		if err != nil {
			break
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "/", strings.NewReader(string(body)))
		if err != nil {
			break
		}
		for k, vs := range r.Header {
			req.Header[k] = append([]string(nil), vs...)
		}
		req.Header.Del("Content-Length")
		req.Header.Del(wire.HeaderName)
		req.Header.Set(wire.HeaderMethod, "tools/list")
		req.Header.Set("Content-Type", mediaJSON)
		req.Header.Set("Accept", mediaJSON+", "+mediaSSE)
		req.ContentLength = int64(len(body))
		a := newAnswer()
		h.inner.ServeHTTP(a, req)
		resp := a.response(toolsListID)
		if resp == nil || resp.Error != nil {
			break
		}
		var list struct {
			Tools []struct {
				Name        string `json:"name"`
				Annotations struct {
					IdempotentHint bool `json:"idempotentHint"`
				} `json:"annotations"`
			} `json:"tools"`
			NextCursor string `json:"nextCursor"`
		}
		if json.Unmarshal(resp.Result, &list) != nil {
			break
		}
		for _, t := range list.Tools {
			hints[t.Name] = t.Annotations.IdempotentHint
		}
		if cursor = list.NextCursor; cursor == "" {
			break
		}
	}
	c.mu.Lock()
	for k, v := range hints {
		c.hints[k] = v
	}
	hint = c.hints[name]
	c.mu.Unlock()
	return hint
}
