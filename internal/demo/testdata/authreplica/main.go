// Command authreplica serves the demo server (package demo) through
// Tidemark's handler behind the go-sdk's bearer-token middleware, sealing
// confirm's requestState with the key ring --request-state-keys names. The
// bearer tokens "alice" and "bob" are the users of the same name. It exists
// for demo_test.go: `tidemark serve` has no authentication, and a state's
// principal binding needs one.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/requeststate"
	"github.com/tidemark-mcp/tidemark/transport"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (host:port)")
	keys := flag.String("request-state-keys", "", "key ring file (requeststate.ParseRing's format)")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ring, _, err := requeststate.LoadRing(*keys)
	if err != nil || ring == nil {
		logger.Error("no key ring", "error", err)
		os.Exit(2)
	}
	sealer := requeststate.New(ring, requeststate.Options{Logger: logger})
	h := tidemark.NewHandler(demo.New(demo.Options{Sealer: sealer}), &tidemark.Options{Transport: transport.Options{Logger: logger}})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Error("listen failed", "error", err)
		os.Exit(1)
	}
	users := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token == "alice" || token == "bob" {
			return &auth.TokenInfo{UserID: token, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	logger.Info("serving", "url", "http://"+ln.Addr().String()+"/mcp")
	srv := &http.Server{Handler: auth.RequireBearerToken(users, nil)(h), ReadHeaderTimeout: 10 * time.Second}
	logger.Error("server failed", "error", srv.Serve(ln))
	os.Exit(1)
}
