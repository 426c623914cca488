package main

// The stdio gateway (`tidemark serve --stdio -- COMMAND`): the handler
// whose sessions each run one subprocess per generation (engine/stdio), and
// whose sessionless requests (protocol 2026-07-28) a bridge serves through
// one more subprocess of the same engine (engine/bridge; docs/gateways.md,
// "Gateway mode").

import (
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine/bridge"
	"github.com/tidemark-mcp/tidemark/engine/stdio"
	"github.com/tidemark-mcp/tidemark/fanout"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// bridgeName names the bridge's subprocesses in the log (field session).
const bridgeName = "bridge"

// stdioHandler returns the Handler of the stdio gateway for command (the
// program and its arguments) and the function that ends its engine before
// the Handler's Close: every subprocess ends at once and is reaped, so none
// outlives the process. The bridge seals the backend's requestState with
// sealer and relays its notifications through bus. The error is
// stdio.New's (the command is not found, an --env entry is malformed).
func (c *serveConfig) stdioHandler(command []string, opts *tidemark.Options, sealer *requeststate.Sealer,
	bus *fanout.Bus, logger *slog.Logger) (*tidemark.Handler, func(), error) {
	// br is set before the Handler exists, so before any Start asks it.
	var br *bridge.Bridge
	gateway, err := stdio.New(stdio.Options{
		Command: command[0], Args: command[1:], Env: c.env, MaxProcesses: c.maxProcesses,
		InitializeTimeout: c.initTimeout, CancelGrace: c.cancelGrace, Hibernate: c.stdioHibernate, Logger: logger, Metrics: opts.Metrics,
		// A session at the bound takes the place of the bridge's idle
		// subprocess, which starts again at the next sessionless request.
		Reclaim: func() bool { return br.EndIdle() },
	})
	if err != nil {
		return nil, nil, err
	}
	br = bridge.New(bridge.Options{
		Dial: bridge.EngineTransport(gateway, bridgeName, logger),
		Bus:  bus, Sealer: sealer, Logger: logger, ProtocolVersions: c.protocolVersions(),
		// The transport has already checked Host and Origin.
		HTTP: mcp.StreamableHTTPOptions{JSONResponse: c.jsonResponse, MaxRequestBodyBytes: c.maxBody, DisableLocalhostProtection: true},
	})
	opts.Transport.Sessionless = br
	return tidemark.NewEngineHandler(gateway, opts), func() {
		br.Close()
		gateway.Close()
	}, nil
}
