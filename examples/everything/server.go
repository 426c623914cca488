// Command everything is an MCP server that exposes every tool, resource,
// resource template, prompt and completion that the official MCP conformance
// suite's server scenarios exercise, for both the 2025-11-25 (session based)
// and the 2026-07-28 (stateless) protocol revisions.
//
// It exists so that a transport can be checked end to end against the suite:
// the features live here, independent of how they are served.
package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// watchInterval is how often the watched resource changes. It is short so
// that a subscriber sees an update within a typical scenario's lifetime.
const watchInterval = 3 * time.Second

// newServer builds the conformance server and returns it together with a
// function that runs its background work (the watched resource's periodic
// updates) until the given context is done. sealer seals the requestState
// of the input-required flows; nil: a random key of this process.
//
// All state lives in the returned server and its closures, so tests can build
// as many independent servers as they like.
func newServer(logger *slog.Logger, sealer *requeststate.Sealer) (*mcp.Server, func(ctx context.Context)) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if sealer == nil {
		sealer = requeststate.New(requeststate.RandomRing(), requeststate.Options{Logger: logger})
	}
	watched := newWatchedResource()

	server := mcp.NewServer(&mcp.Implementation{
		Name:    "tidemark-everything",
		Title:   "Tidemark conformance server",
		Version: "0.1.0",
	}, &mcp.ServerOptions{
		Instructions: "Exposes the tools, resources and prompts used by the MCP conformance suite.",
		Logger:       logger,
		// Logging stays advertised (legacy clients call logging/setLevel),
		// and the tools/prompts/resources capabilities are inferred from what
		// is registered below, with listChanged, which the stateless
		// scenario's subscription checks rely on.
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}},
		// A completion handler makes the server advertise "completions".
		CompletionHandler: complete,
		// Subscribe handlers make the server advertise resources.subscribe;
		// the SDK itself tracks which session subscribed to which URI.
		SubscribeHandler:   subscribe(logger),
		UnsubscribeHandler: unsubscribe(logger),
	})

	addContentTools(server)
	addInteractiveTools(server)
	addDiagnosticTools(server)
	addInputRequiredTools(server, sealer)
	addTaskTools(server)
	// The demo's confirm tool: one question, asked through elicitation or
	// an input-required result depending on the protocol revision.
	demo.AddConfirm(server, sealer)
	addResources(server, watched)
	addPrompts(server)
	addInputRequiredPrompt(server)

	run := func(ctx context.Context) {
		ticker := time.NewTicker(watchInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				rev := watched.bump()
				if err := server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: watchedURI}); err != nil {
					logger.Warn("notifying watched resource update", "revision", rev, "error", err)
				}
			}
		}
	}
	return server, run
}
