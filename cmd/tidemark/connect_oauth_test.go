package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// storedClientID returns the client_id of the one token file under
// config's tidemark/tokens.
func storedClientID(t *testing.T, config string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(config, "tidemark", "tokens", "*.json"))
	if len(files) != 1 {
		t.Fatalf("token files %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	var rec struct {
		ClientID string `json:"client_id"`
	}
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.ClientID == "" {
		t.Fatalf("token file %s: %v %s", files[0], err, b)
	}
	return rec.ClientID
}

// TestConnectOAuthReRegisters: the TypeScript SDK's example
// authorization server restarts under a running `tidemark connect`, and
// so forgets the client the bridge registered and its token. The next
// call is refused by `tidemark serve` (introspection: not active), the
// authorization endpoint refuses the old client_id (HTTP 400
// invalid_client), and the bridge registers a new client and authorizes
// with it within that call, which succeeds; the token file then holds
// the new client.
func TestConnectOAuthReRegisters(t *testing.T) {
	port := testenv.FreePort(t)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	issuer := fmt.Sprintf("http://127.0.0.1:%d/", testenv.FreePort(t))
	first := startTSAuthServerAt(t, issuer, endpoint)
	tidemark := testenv.BuildTidemark(t)
	serve := testenv.StartProcess(t, tidemark, "serve", "--addr", "127.0.0.1:"+strconv.Itoa(port),
		"--auth-issuer", issuer, "--auth-introspection", issuer+"introspect", "--auth-tool-scope", "echo=mcp:tools")
	testenv.ServeURL(t, serve)

	config := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr testenv.LogBuffer
	cmd := exec.Command(tidemark, "connect", "--oauth-browser", "fetch", endpoint)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+config)
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "reregister-test-host", Version: "1.0.0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("initialize through tidemark connect: %v; bridge log:\n%s", err, stderr.String())
	}
	defer cs.Close()
	echo := func(text string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
		if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != text {
			t.Fatalf("tools/call echo %q: %+v, %v; bridge log:\n%s", text, res, err, stderr.String())
		}
	}
	echo("before the restart")
	oldClient := storedClientID(t, config)

	first.Kill()
	<-first.Done()
	startTSAuthServerAt(t, issuer, endpoint)
	echo("after the restart")

	if newClient := storedClientID(t, config); newClient == oldClient {
		t.Errorf("the token file still holds the forgotten client %s", oldClient)
	}
	log := stderr.String()
	const again = `msg="oauth: the authorization server refuses the registered client; registering again"`
	if n := strings.Count(log, again); n != 1 || !strings.Contains(log, "client_id="+oldClient) || strings.Contains(log, `msg="oauth: authorization failed`) {
		t.Errorf("the bridge logged %s %d times, want once for client %s, and no failed authorization; log:\n%s", again, n, oldClient, log)
	}
}
