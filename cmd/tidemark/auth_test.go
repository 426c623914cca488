package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// startTSAuthServer runs the TypeScript SDK's example authorization server
// (testdata/tsauthserver.mjs) for the MCP endpoint endpoint, and returns
// its issuer identifier once its metadata is served.
func startTSAuthServer(t *testing.T, endpoint string) string {
	t.Helper()
	testenv.NeedNode(t)
	issuer := fmt.Sprintf("http://127.0.0.1:%d/", testenv.FreePort(t))
	startTSAuthServerAt(t, issuer, endpoint)
	return issuer
}

// startTSAuthServerAt runs the TypeScript SDK's example authorization
// server at issuer (an http://127.0.0.1:PORT/ URL) for the MCP endpoint
// endpoint, and returns its process once its metadata is served. The
// server keeps its clients and tokens in memory: a new process knows none
// of its predecessor's.
func startTSAuthServerAt(t *testing.T, issuer, endpoint string) *testenv.Process {
	t.Helper()
	testenv.NeedNode(t)
	cmd := exec.Command(testenv.Node(t), "testdata/tsauthserver.mjs")
	cmd.Env = append(os.Environ(), "SDK_DIR="+filepath.Join(testenv.NodeModules(t), "@modelcontextprotocol", "sdk"),
		"AUTH_URL="+issuer, "MCP_URL="+endpoint)
	p := testenv.StartCmd(t, cmd)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(issuer + ".well-known/oauth-authorization-server")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the TypeScript SDK's authorization server did not serve its metadata within 20 s; output:\n%s", p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bridgeEcho runs `tidemark connect --oauth-browser fetch endpoint` with
// config as $XDG_CONFIG_HOME, as a desktop host does (the go-sdk's client
// over the bridge's stdio), calls echo with text, and returns the text of
// its result and the access token the bridge stored.
func bridgeEcho(t *testing.T, tidemark, endpoint, config, text string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr testenv.LogBuffer
	cmd := exec.Command(tidemark, "connect", "--oauth-browser", "fetch", endpoint)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+config)
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "auth-test-host", Version: "1.0.0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("initialize through tidemark connect: %v; bridge log:\n%s", err, stderr.String())
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	cs.Close()
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("tools/call echo: %+v, %v; bridge log:\n%s", res, err, stderr.String())
	}
	files, _ := filepath.Glob(filepath.Join(config, "tidemark", "tokens", "*.json"))
	if len(files) != 1 {
		t.Fatalf("token files %v, want one", files)
	}
	b, _ := os.ReadFile(files[0])
	var stored struct {
		Token struct {
			AccessToken string `json:"access_token"`
		} `json:"token"`
	}
	if json.Unmarshal(b, &stored) != nil || stored.Token.AccessToken == "" {
		t.Fatalf("token file %s holds no access token", files[0])
	}
	return res.Content[0].(*mcp.TextContent).Text, stored.Token.AccessToken
}

// rawPost posts body to endpoint with the bearer token (none when empty)
// and the session id (none when empty), and returns the status, the
// WWW-Authenticate header, the Mcp-Session-Id header and the body.
func rawPost(t *testing.T, endpoint, token, session, body string) (int, string, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), resp.Header.Get("Mcp-Session-Id"), string(b)
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// TestServeAuthTypeScript: `tidemark serve --auth-issuer` in front of the
// TypeScript SDK's example authorization server (opaque tokens, verified
// by introspection). A request without a token gets 401 and the challenge
// that names the protected resource metadata, which is served at both
// well-known paths; `tidemark connect --oauth-browser fetch` registers a
// client, obtains a token and calls a tool whose scope the token carries;
// a second client's token presenting the first one's session gets the
// very 404 of a session that never existed; a token the server does not
// know gets 401 invalid_token.
func TestServeAuthTypeScript(t *testing.T) {
	port := testenv.FreePort(t)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	issuer := startTSAuthServer(t, endpoint)
	tidemark := testenv.BuildTidemark(t)
	serve := testenv.StartProcess(t, tidemark, "serve", "--addr", "127.0.0.1:"+strconv.Itoa(port),
		"--auth-issuer", issuer, "--auth-introspection", issuer+"introspect", "--auth-tool-scope", "echo=mcp:tools")
	testenv.ServeURL(t, serve)
	metadata := fmt.Sprintf("http://127.0.0.1:%d/.well-known/oauth-protected-resource/mcp", port)

	status, challenge, _, body := rawPost(t, endpoint, "", "", initializeBody)
	if status != http.StatusUnauthorized || challenge != `Bearer resource_metadata="`+metadata+`"` ||
		body != `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"this server needs a bearer token: obtain one from the authorization server its protected resource metadata names, and send it as Authorization: Bearer TOKEN","data":{"reason":"token_missing"}}}` {
		t.Fatalf("no token: %d %q %s", status, challenge, body)
	}
	wantMeta := `{"resource":"` + endpoint + `","authorization_servers":["` + issuer + `"],"bearer_methods_supported":["header"]}` + "\n"
	for _, u := range []string{metadata, fmt.Sprintf("http://127.0.0.1:%d/.well-known/oauth-protected-resource", port)} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != wantMeta {
			t.Fatalf("GET %s: %d %s, want 200 %s", u, resp.StatusCode, b, wantMeta)
		}
	}

	text, tokenA := bridgeEcho(t, tidemark, endpoint, t.TempDir(), "tide")
	if text != "tide" {
		t.Fatalf("echo through the bridge: %q, want tide", text)
	}
	status, _, sessionA, body := rawPost(t, endpoint, tokenA, "", initializeBody)
	if status != http.StatusOK || sessionA == "" {
		t.Fatalf("initialize with the first client's token: %d %s", status, body)
	}
	_, tokenB := bridgeEcho(t, tidemark, endpoint, t.TempDir(), "second")
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	status, _, _, stolen := rawPost(t, endpoint, tokenB, sessionA, call)
	_, _, _, unknown := rawPost(t, endpoint, tokenB, strings.Repeat("0", len(sessionA)), call)
	if status != http.StatusNotFound || stolen != unknown ||
		stolen != `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"session is unknown: send initialize to start a new session","data":{"reason":"session_not_found"}}}` {
		t.Fatalf("the second client's token with the first one's session: %d %s; a session that never existed: %s", status, stolen, unknown)
	}
	if status, _, _, body := rawPost(t, endpoint, tokenA, sessionA, call); status != http.StatusOK || !strings.Contains(body, `"text":"x"`) {
		t.Fatalf("the first client's own session: %d %s", status, body)
	}

	status, challenge, _, body = rawPost(t, endpoint, "not-a-token-it-issued", "", initializeBody)
	if status != http.StatusUnauthorized || challenge != `Bearer error="invalid_token", resource_metadata="`+metadata+`"` ||
		body != `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the bearer token is not valid here (the authorization server says the token is not active): obtain a new token for this server","data":{"reason":"token_invalid"}}}` {
		t.Fatalf("unknown token: %d %q %s", status, challenge, body)
	}
	if out := serve.Output(); strings.Contains(out, tokenA) || strings.Contains(out, tokenB) || strings.Contains(out, tokenA[:8]) {
		t.Fatalf("tidemark serve logged a token:\n%s", out)
	}
}
