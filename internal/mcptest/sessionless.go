package mcptest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// SessionlessVersion is the protocol version of the sessionless era
// (MCP 2026-07-28), which SessionlessBody and Listen send.
const SessionlessVersion = "2026-07-28"

// SessionlessBody returns the POST body of a 2026-07-28 request: a
// JSON-RPC request with integer id, method and params, whose params also
// carry the _meta that era asks of every request:
// io.modelcontextprotocol/protocolVersion SessionlessVersion,
// io.modelcontextprotocol/clientInfo {"name":"t","version":"1"}, and
// io.modelcontextprotocol/clientCapabilities caps (nil: {}). params may be
// nil and is not changed. It panics if params or caps cannot be marshaled
// to JSON, which is a bug in the test.
func SessionlessBody(id int64, method string, params, caps map[string]any) []byte {
	if caps == nil {
		caps = map[string]any{}
	}
	p := make(map[string]any, len(params)+1)
	for k, v := range params {
		p[k] = v
	}
	p["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    SessionlessVersion,
		"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "t", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": p})
	if err != nil {
		panic(fmt.Sprintf("mcptest: marshal sessionless body: %v", err))
	}
	return b
}

// Acknowledged is the method of the notification that opens a listen
// stream once its subscriptions are in place (MCP 2026-07-28).
const Acknowledged = "notifications/subscriptions/acknowledged"

// Listen POSTs body, a subscriptions/listen (SessionlessBody), with the
// headers of Client.NewRequest plus MCP-Protocol-Version
// SessionlessVersion and Mcp-Method subscriptions/listen, and reads the
// answer's event stream up to the acknowledgment (ReadToAcknowledged). It
// returns the response and a reader of its body positioned after the line
// naming the acknowledgment; the caller closes resp.Body. Errors: a
// *StatusError unless the answer is 200; the error of ReadToAcknowledged,
// with the body closed, when the stream ends before the acknowledgment.
func (c *Client) Listen(ctx context.Context, body []byte) (*http.Response, *bufio.Reader, error) {
	req, err := c.NewRequest(ctx, http.MethodPost, body)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set(wire.HeaderProtocolVersion, SessionlessVersion)
	req.Header.Set(wire.HeaderMethod, "subscriptions/listen")
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, ReadStatusError(resp)
	}
	br := bufio.NewReader(resp.Body)
	if err := ReadToAcknowledged(br); err != nil {
		resp.Body.Close()
		return nil, nil, err
	}
	return resp, br, nil
}

// ReadToAcknowledged reads br line by line up to and including the first
// line that names Acknowledged, so that the listen stream br reads has its
// subscriptions in place. It fails with the read's error if the stream
// ends first.
func ReadToAcknowledged(br *bufio.Reader) error {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("mcptest: reading the listen stream to its acknowledgment: %w", err)
		}
		if strings.Contains(line, Acknowledged) {
			return nil
		}
	}
}
