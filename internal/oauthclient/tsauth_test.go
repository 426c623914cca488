package oauthclient_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
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

// startTSAuthServer runs the TypeScript SDK's example server
// (simpleStreamableHttp, @modelcontextprotocol/sdk 1.32.2) with
// --oauth --oauth-strict: an MCP server at http://localhost:PORT/mcp that
// requires a bearer token issued for it (RFC 8707), and the SDK's demo
// authorization server (demoInMemoryOAuthProvider: dynamic registration,
// PKCE, consent granted without a user) on a second port. It returns the
// MCP endpoint once the protected resource metadata is served.
func startTSAuthServer(t *testing.T) string {
	t.Helper()
	testenv.NeedNode(t)
	example := filepath.Join(testenv.NodeModules(t), "@modelcontextprotocol", "sdk", "dist", "esm", "examples", "server", "simpleStreamableHttp.js")
	mcpPort, authPort := testenv.FreePort(t), testenv.FreePort(t)
	cmd := exec.Command(testenv.Node(t), example, "--oauth", "--oauth-strict")
	cmd.Env = append(os.Environ(), "MCP_PORT="+strconv.Itoa(mcpPort), "MCP_AUTH_PORT="+strconv.Itoa(authPort))
	srv := testenv.StartCmd(t, cmd)
	endpoint := fmt.Sprintf("http://localhost:%d/mcp", mcpPort)
	prm := fmt.Sprintf("http://localhost:%d/.well-known/oauth-protected-resource/mcp", mcpPort)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(prm)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return endpoint
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the TypeScript SDK's OAuth example did not serve %s within 20 s; output:\n%s", prm, srv.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bridgeRun is one run of `tidemark connect` under a host.
type bridgeRun struct {
	greeting string // the text of the greet tool's result
	log      string // the bridge's stderr
}

// runBridge runs `tidemark connect --oauth-browser fetch endpoint` as a
// desktop host does (the go-sdk's client over the bridge's stdio),
// initializes, calls the tool greet and closes the bridge's stdin.
func runBridge(t *testing.T, tidemark, endpoint string) bridgeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr testenv.LogBuffer
	cmd := exec.Command(tidemark, "connect", "--oauth-browser", "fetch", "--log-level", "DEBUG", endpoint)
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-test-host", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("initialize through tidemark connect: %v; bridge log:\n%s", err, stderr.String())
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "tide"}})
	if err != nil {
		cs.Close()
		t.Fatalf("tools/call greet: %v; bridge log:\n%s", err, stderr.String())
	}
	if err := cs.Close(); err != nil {
		t.Errorf("closing the bridge: %v", err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return bridgeRun{greeting: text.String(), log: stderr.String()}
}

// TestTypeScriptAuthServer: against a real authorization server and an
// MCP server that requires its tokens, `tidemark connect --oauth-browser
// fetch` registers a client, obtains a token and calls a tool; the token
// is kept in one file of mode 0600, in a directory of mode 0700 under
// $XDG_CONFIG_HOME/tidemark/tokens; a second run uses that token: no
// authorization, no registration, the file unchanged.
func TestTypeScriptAuthServer(t *testing.T) {
	endpoint := startTSAuthServer(t)
	tidemark := testenv.BuildTidemark(t)
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)

	first := runBridge(t, tidemark, endpoint)
	if first.greeting != "Hello, tide!" {
		t.Errorf("first run: greet answered %q, want %q", first.greeting, "Hello, tide!")
	}
	for _, line := range []string{`msg="oauth: the server asks for authorization"`, `msg="oauth: authorized"`} {
		if strings.Count(first.log, line) != 1 {
			t.Errorf("first run: the bridge logged %s %d times, want once; log:\n%s", line, strings.Count(first.log, line), first.log)
		}
	}
	dir := filepath.Join(config, "tidemark", "tokens")
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("token directory %s: %v; want mode 0700", dir, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("token files = %v, want one", files)
	}
	if fi, err := os.Stat(files[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, %v; want mode 0600", files[0], fi.Mode().Perm(), err)
	}
	stored, _ := os.ReadFile(files[0])
	for _, field := range []string{`"server": "` + endpoint + `"`, `"resource": "` + endpoint + `"`, `"access_token": "`, `"client_id": "`} {
		if !bytes.Contains(stored, []byte(field)) {
			t.Errorf("token file lacks %s:\n%s", field, stored)
		}
	}

	second := runBridge(t, tidemark, endpoint)
	if second.greeting != "Hello, tide!" {
		t.Errorf("second run: greet answered %q, want %q", second.greeting, "Hello, tide!")
	}
	if strings.Contains(second.log, "oauth: the server asks for authorization") {
		t.Errorf("second run authorized again instead of using the stored token; log:\n%s", second.log)
	}
	if again, _ := os.ReadFile(files[0]); !bytes.Equal(again, stored) {
		t.Errorf("second run rewrote the token file:\n%s\nwant:\n%s", again, stored)
	}
}

// TestSlowAuthorization: the person at the browser may take longer than
// --start-timeout to authorize; the bound is for the server's answer, so
// the bridge waits for the redirect and the host's initialize succeeds.
// Here the URL that --oauth-browser print shows is opened 2 s after it
// is printed, with --start-timeout 500ms.
func TestSlowAuthorization(t *testing.T) {
	endpoint := startTSAuthServer(t)
	tidemark := testenv.BuildTidemark(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr testenv.LogBuffer
	cmd := exec.Command(tidemark, "connect", "--oauth-browser", "print", "--start-timeout", "500ms", "--log-level", "DEBUG", endpoint)
	cmd.Stderr = &stderr
	browsed := make(chan error, 1)
	go func() {
		const prompt = "open this URL in a browser:\n"
		for ctx.Err() == nil {
			if _, after, ok := strings.Cut(stderr.String(), prompt); ok {
				if u, _, ok := strings.Cut(after, "\n"); ok {
					time.Sleep(2 * time.Second) // the person reads, logs in, consents
					resp, err := http.Get(u)    // follows the redirects to the callback
					if err == nil {
						resp.Body.Close()
					}
					browsed <- err
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		browsed <- ctx.Err()
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-test-host", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("initialize through tidemark connect: %v; bridge log:\n%s", err, stderr.String())
	}
	defer cs.Close()
	if err := <-browsed; err != nil {
		t.Fatalf("opening the authorization URL: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "tide"}})
	if err != nil {
		t.Fatalf("tools/call greet: %v; bridge log:\n%s", err, stderr.String())
	}
	if len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "Hello, tide!" {
		t.Fatalf("greet answered %+v, want Hello, tide!", res.Content)
	}
}
