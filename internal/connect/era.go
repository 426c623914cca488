// era.go holds the rule by which `tidemark connect --protocol auto` picks
// the era it speaks to the server, and the server/discover probe that
// feeds it (DESIGN.md, "The connect bridge").

package connect

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// Values of Options.Protocol (and of --protocol).
const (
	// ProtocolAuto picks the era by PickEra.
	ProtocolAuto = "auto"
	// ProtocolStateful is the stateful era (2025-03-26 to 2025-11-25),
	// whose streams resume.
	ProtocolStateful = "2025-11-25"
	// ProtocolSessionless is the sessionless era, whose calls outlive a
	// connection only as tasks.
	ProtocolSessionless = "2026-07-28"
)

// probeTimeout bounds the server/discover probe of ProtocolAuto.
const probeTimeout = 5 * time.Second

// Era is what the server/discover probe found, and the era picked.
type Era struct {
	// Pick is ProtocolStateful or ProtocolSessionless.
	Pick string
	// Supported is the answer's supportedVersions; nil when the probe got
	// no result.
	Supported []string
	// Tasks reports that the answer offers the Tasks extension.
	Tasks bool
	// Err is why the probe got no result (the server refused or does not
	// know server/discover, or could not be reached); nil otherwise.
	Err error
}

// PickEra is the rule of ProtocolAuto, given the result of a
// server/discover (MCP 2026-07-28, SEP-2575) or its failure: the stateful
// era whenever the server may serve it, since its streams resume every
// call through cuts and restarts; the sessionless era only when
// server/discover answered and every revision it lists is 2026-07-28 or
// later, so that the server serves nothing older. A failed probe (a
// server of the stateful era only, which refuses the request, or one the
// bridge cannot reach, for which the stateful path reports the failure)
// and an empty list pick the stateful era.
func PickEra(discovered bool, supported []string) string {
	if !discovered || len(supported) == 0 {
		return ProtocolStateful
	}
	for _, v := range supported {
		if v < ProtocolSessionless {
			return ProtocolStateful
		}
	}
	return ProtocolSessionless
}

// probeEra sends one server/discover to o.URL, framed as the sessionless
// era asks (MCP-Protocol-Version and Mcp-Method headers, the per-request
// _meta), within probeTimeout or o.StartTimeout, whichever is shorter (a
// server that never answers costs the host's first initialize no more
// than the start timeout it was promised), and applies PickEra to its
// answer.
func probeEra(ctx context.Context, o Options) Era {
	bound := probeTimeout
	if o.StartTimeout > 0 {
		bound = min(bound, o.StartTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	supported, offered, err := discover(ctx, o)
	return Era{Pick: PickEra(err == nil, supported), Supported: supported, Tasks: offered, Err: err}
}

// discover returns the supportedVersions of o.URL's server/discover
// answer, and whether it offers the Tasks extension.
func discover(ctx context.Context, o Options) ([]string, bool, error) {
	id, _ := jsonrpc.MakeID("tidemark-connect-discover")
	params := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    ProtocolSessionless,
		"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "tidemark connect", "version": "probe"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, false, err
	}
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: "server/discover", Params: raw})
	if err != nil {
		return nil, false, err
	}
	req, err := wire.NewRequest(ctx, http.MethodPost, o.URL, body, o.Header, "", ProtocolSessionless)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set(wire.HeaderMethod, "server/discover")
	hc := o.ProbeHTTPClient
	if hc == nil {
		hc = o.HTTPClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		wire.Drain(resp)
		return nil, false, fmt.Errorf("server/discover: HTTP %d", resp.StatusCode)
	}
	r, err := wire.ReadResponse(resp, id, maxProbeAnswer)
	if err != nil {
		return nil, false, fmt.Errorf("server/discover answer: %w", err)
	}
	if r.Error != nil {
		return nil, false, fmt.Errorf("server/discover: %w", r.Error)
	}
	var res struct {
		SupportedVersions []string `json:"supportedVersions"`
		Capabilities      struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return nil, false, fmt.Errorf("server/discover result: %w", err)
	}
	ext, ok := res.Capabilities.Extensions[tasks.ExtensionID]
	return res.SupportedVersions, ok && string(ext) != "null", nil
}

// maxProbeAnswer bounds the server/discover answer read (bytes).
const maxProbeAnswer = 1 << 20
