package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	staticTextURI   = "test://static-text"
	staticBinaryURI = "test://static-binary"
	watchedURI      = "test://watched-resource"

	templatePrefix = "test://template/"
	templateSuffix = "/data"

	staticText = "This is the content of the static text resource."
)

// watchedResource is a resource whose content changes over time, so that
// resource subscriptions have something to report.
type watchedResource struct {
	mu       sync.Mutex
	revision int
	changed  time.Time
}

func newWatchedResource() *watchedResource {
	return &watchedResource{changed: time.Now()}
}

// bump records a change and returns the new revision.
func (w *watchedResource) bump() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.revision++
	w.changed = time.Now()
	return w.revision
}

func (w *watchedResource) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("Watched resource, revision %d, last changed %s", w.revision, w.changed.UTC().Format(time.RFC3339))
}

// addResources registers the static resources, the watched resource and the
// resource template.
func addResources(s *mcp.Server, watched *watchedResource) {
	s.AddResource(&mcp.Resource{
		URI:         staticTextURI,
		Name:        "static-text",
		Description: "A fixed plain-text resource.",
		MIMEType:    "text/plain",
	}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
			{URI: staticTextURI, MIMEType: "text/plain", Text: staticText},
		}}, nil
	})

	s.AddResource(&mcp.Resource{
		URI:         staticBinaryURI,
		Name:        "static-binary",
		Description: "A fixed binary resource: a 1x1 red PNG image.",
		MIMEType:    "image/png",
	}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
			{URI: staticBinaryURI, MIMEType: "image/png", Blob: redPixelPNG()},
		}}, nil
	})

	s.AddResource(&mcp.Resource{
		URI:         watchedURI,
		Name:        "watched-resource",
		Description: fmt.Sprintf("A text resource that changes every %s; subscribe to be notified.", watchInterval),
		MIMEType:    "text/plain",
	}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
			{URI: watchedURI, MIMEType: "text/plain", Text: watched.text()},
		}}, nil
	})

	s.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: templatePrefix + "{id}" + templateSuffix,
		Name:        "template",
		Description: "A JSON document generated for any id.",
		MIMEType:    "application/json",
	}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		id, ok := strings.CutPrefix(uri, templatePrefix)
		if ok {
			id, ok = strings.CutSuffix(id, templateSuffix)
		}
		if !ok || id == "" || strings.Contains(id, "/") {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		doc, err := json.Marshal(struct {
			ID           string `json:"id"`
			TemplateTest bool   `json:"templateTest"`
			Data         string `json:"data"`
		}{id, true, "Data for ID: " + id})
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
			{URI: uri, MIMEType: "application/json", Text: string(doc)},
		}}, nil
	})
}

// subscribable reports whether uri names a resource that can be subscribed
// to: one of the fixed resources (only the watched one ever changes, but
// subscribing to a resource that stays put is not an error).
func subscribable(uri string) bool {
	switch uri {
	case staticTextURI, staticBinaryURI, watchedURI:
		return true
	}
	return false
}

// subscribe vets subscriptions: the SDK records the subscription when this
// returns nil, so unknown URIs are refused here.
func subscribe(logger *slog.Logger) func(context.Context, *mcp.SubscribeRequest) error {
	return func(_ context.Context, req *mcp.SubscribeRequest) error {
		if !subscribable(req.Params.URI) {
			return mcp.ResourceNotFoundError(req.Params.URI)
		}
		logger.Debug("resource subscribed", "uri", req.Params.URI)
		return nil
	}
}

// unsubscribe accepts every unsubscription: dropping a subscription that does
// not exist is harmless.
func unsubscribe(logger *slog.Logger) func(context.Context, *mcp.UnsubscribeRequest) error {
	return func(_ context.Context, req *mcp.UnsubscribeRequest) error {
		logger.Debug("resource unsubscribed", "uri", req.Params.URI)
		return nil
	}
}
