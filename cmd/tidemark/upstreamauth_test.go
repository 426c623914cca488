package main

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// recordingUpstream is a Streamable HTTP MCP server (the go-sdk's, with
// an echo tool) on loopback that records the Authorization headers of
// every request it receives, and the whole header of the first one.
type recordingUpstream struct {
	url   string
	mu    sync.Mutex
	auth  [][]string  // Authorization values of each request, in order
	first http.Header // the first request's header
}

func startRecordingUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "recording", Version: "1.0.0"}, nil)
	type args struct {
		Text string `json:"text"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	u := &recordingUpstream{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Values("Authorization"))
		if u.first == nil {
			u.first = r.Header.Clone()
		}
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	u.url = ts.URL + "/mcp"
	return u
}

// seen returns the Authorization values of each request so far.
func (u *recordingUpstream) seen() [][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.auth)
}

// tokenRequest is what the loopback token endpoint received.
type tokenRequest struct {
	user, password, grant, scope, resource string
}

// startTokenEndpoint serves an OAuth token endpoint (RFC 6749, section
// 4.4) on loopback: the client gateway with secret s3cret-of-gateway gets
// gateway-token, any other 401 invalid_client. It returns its URL and the
// requests it received.
func startTokenEndpoint(t *testing.T) (string, func() []tokenRequest) {
	t.Helper()
	var mu sync.Mutex
	var got []tokenRequest
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, password, _ := r.BasicAuth()
		r.ParseForm()
		mu.Lock()
		got = append(got, tokenRequest{user, password, r.PostForm.Get("grant_type"), r.PostForm.Get("scope"), r.PostForm.Get("resource")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if user != "gateway" || password != "s3cret-of-gateway" {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client"})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"access_token": "gateway-token", "token_type": "Bearer", "expires_in": 3600})
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/token", func() []tokenRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// serveGateway starts `tidemark serve --upstream` with args added and env
// added to its environment, and returns its MCP endpoint and process.
func serveGateway(t *testing.T, env []string, args ...string) (string, *testenv.Process) {
	t.Helper()
	cmd := exec.Command(testenv.BuildTidemark(t), append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := testenv.StartCmd(t, cmd)
	return testenv.ServeURL(t, p), p
}

// gatewayCall initializes a session through endpoint with the client's
// token clientToken and calls echo in it; it returns the status and body
// of the initialize and, when it succeeded, of the call.
func gatewayCall(t *testing.T, endpoint, clientToken string) (int, string, int, string) {
	t.Helper()
	status, _, session, body := rawPost(t, endpoint, clientToken, "", initializeBody)
	if status != http.StatusOK {
		return status, body, 0, ""
	}
	rawPost(t, endpoint, clientToken, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	callStatus, _, _, callBody := rawPost(t, endpoint, clientToken, session,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"tide"}}}`)
	return status, body, callStatus, callBody
}

// TestUpstreamClientTokenStays: the client's Authorization reaches an
// --upstream server only when the operator forwards it explicitly
// (--upstream-forward-header Authorization, token passthrough); by
// default the upstream sees no Authorization at all.
func TestUpstreamClientTokenStays(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // the Authorization values of each upstream request
	}{
		{"default", nil, nil},
		{"forwarded", []string{"--upstream-forward-header", "Authorization"}, []string{"Bearer client-token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startRecordingUpstream(t)
			endpoint, _ := serveGateway(t, nil, append([]string{"--upstream", up.url}, tc.args...)...)
			if status, body, callStatus, callBody := gatewayCall(t, endpoint, "client-token"); status != http.StatusOK ||
				callStatus != http.StatusOK || !strings.Contains(callBody, `"text":"tide"`) {
				t.Fatalf("initialize %d %s; call %d %s", status, body, callStatus, callBody)
			}
			// The initialize's header, exactly: the client's other
			// headers stay too.
			names := slices.Sorted(maps.Keys(up.first))
			wantNames := []string{"Accept", "Accept-Encoding", "Content-Length", "Content-Type", "User-Agent", "Via"}
			if tc.want != nil {
				wantNames = slices.Insert(wantNames, 2, "Authorization")
			}
			if !slices.Equal(names, wantNames) {
				t.Errorf("the upstream's initialize carried the headers %q, want %q", names, wantNames)
			}
			seen := up.seen()
			if len(seen) < 3 {
				t.Fatalf("the upstream received %d requests, want at least 3 (initialize, initialized, call)", len(seen))
			}
			for i, got := range seen {
				if !slices.Equal(got, tc.want) {
					t.Errorf("upstream request %d carried Authorization %q, want %q", i, got, tc.want)
				}
			}
		})
	}
}

// TestUpstreamOAuthToken: with --upstream-oauth-token-url the gateway
// obtains a token of its own by client credentials (the secret from
// $TIDEMARK_UPSTREAM_OAUTH_CLIENT_SECRET, the scope asked for, the
// upstream's URL as resource) once, and every upstream request carries it,
// never the client's. When the token endpoint refuses the client (401), a
// request gets 503 upstream_unreachable and the log says why, without the
// secret.
func TestUpstreamOAuthToken(t *testing.T) {
	tokenURL, requests := startTokenEndpoint(t)
	up := startRecordingUpstream(t)
	endpoint, _ := serveGateway(t, []string{upstreamSecretEnv + "=s3cret-of-gateway"}, "--upstream", up.url,
		"--upstream-oauth-token-url", tokenURL, "--upstream-oauth-client-id", "gateway", "--upstream-oauth-scope", "mcp:tools")
	for range 2 {
		if status, body, callStatus, callBody := gatewayCall(t, endpoint, "client-token"); status != http.StatusOK ||
			callStatus != http.StatusOK || !strings.Contains(callBody, `"text":"tide"`) {
			t.Fatalf("initialize %d %s; call %d %s", status, body, callStatus, callBody)
		}
	}
	seen := up.seen()
	if len(seen) < 6 {
		t.Fatalf("the upstream received %d requests, want at least 6", len(seen))
	}
	for i, got := range seen {
		if !slices.Equal(got, []string{"Bearer gateway-token"}) {
			t.Errorf("upstream request %d carried Authorization %q, want the gateway's own [Bearer gateway-token]", i, got)
		}
	}
	want := []tokenRequest{{"gateway", "s3cret-of-gateway", "client_credentials", "mcp:tools", up.url}}
	if got := requests(); !slices.Equal(got, want) {
		t.Errorf("token requests %+v, want one (the token is reused) %+v", got, want)
	}

	// A wrong secret: the token endpoint answers 401 invalid_client.
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("wrong-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused, serve := serveGateway(t, nil, "--upstream", up.url, "--upstream-oauth-token-url", tokenURL,
		"--upstream-oauth-client-id", "gateway", "--upstream-oauth-client-secret-file", secretFile)
	before := len(up.seen())
	status, _, _, body := rawPost(t, refused, "client-token", "", initializeBody)
	const wantBody = `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the server this gateway fronts cannot be reached now: retry the request","data":{"reason":"upstream_unreachable"}}}`
	if status != http.StatusServiceUnavailable || body != wantBody {
		t.Errorf("initialize with the token endpoint refusing: %d %s, want 503 %s", status, body, wantBody)
	}
	if n := len(up.seen()); n != before {
		t.Errorf("the upstream received %d requests without the gateway's token, want none", n-before)
	}
	line := serve.WaitFor(t, `msg="upstream token refused".*`, 10*time.Second)[0]
	if !strings.Contains(line, "401 Unauthorized invalid_client") || !strings.Contains(line, "client_id=gateway") {
		t.Errorf("log line %q, want the token endpoint's 401 invalid_client and the client ID", line)
	}
	if out := serve.Output(); strings.Contains(out, "wrong-secret-value") || strings.Contains(out, "client-token") {
		t.Errorf("tidemark serve logged the secret or the client's token:\n%s", out)
	}
}
