package bridge

// This file holds the mirror of the backend's tools on the Bridge's
// server: the go-sdk's stateless handler checks a tools/call's Mcp-Param-*
// headers against the schema of the tool as its server knows it (MCP
// 2026-07-28, SEP-2243), so the server must know the backend's tools.

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mirrored reports whether the server knows tool name.
func (b *Bridge) mirrored(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tools[name]
}

// syncTools makes the server's tools those the backend lists now, each
// with a handler that forwards its calls. A tool the go-sdk cannot take
// (its input schema is not an object) is left out: its calls are still
// forwarded, without the header check. A listing that fails leaves the
// mirror as it was.
func (b *Bridge) syncTools(ctx context.Context, c *conn) {
	b.mu.Lock()
	s := b.server
	b.mu.Unlock()
	caps := c.cs.InitializeResult().Capabilities
	if caps == nil || caps.Tools == nil {
		return
	}
	var tools []*mcp.Tool
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			b.logger.Warn("listing the backend's tools failed; the header check knows the tools it knew", "error", err)
			return
		}
		tools = append(tools, t)
	}
	now := make(map[string]bool, len(tools))
	for _, t := range tools {
		if err := addTool(s, t, b.toolHandler); err != nil {
			b.logger.Warn("the backend's tool cannot be mirrored; its Mcp-Param headers go unchecked", "tool", t.Name, "error", err)
			continue
		}
		now[t.Name] = true
	}
	b.mu.Lock()
	var gone []string
	for name := range b.tools {
		if !now[name] {
			gone = append(gone, name)
		}
	}
	b.tools = now
	b.mu.Unlock()
	s.RemoveTools(gone...)
}

// resyncTools syncs the mirror after the backend said its tools changed.
// It runs apart from the notification's handler: the client reads the
// backend's answers on the goroutine that runs that handler.
func (b *Bridge) resyncTools(cs *mcp.ClientSession) {
	b.mu.Lock()
	c := b.conn
	b.mu.Unlock()
	if c == nil || c.cs != cs {
		return
	}
	// The listing counts as a request served: the connection is not
	// ended as idle under it.
	b.enter()
	go func() {
		defer b.leave()
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.ConnectTimeout)
		defer cancel()
		b.syncTools(ctx, c)
	}()
}

// toolHandler forwards a call of a mirrored tool.
func (b *Bridge) toolHandler(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return b.callTool(ctx, req, req.Params)
}

// addTool adds t to s, turning the go-sdk's panic on a schema it refuses
// into an error.
func addTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	s.AddTool(t, h)
	return nil
}
