package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// exchangeLog records what a client sends through a reverse proxy and what
// the server behind it answers: one "METHOD STATUS" line per request, the
// JSON-RPC method of a POST (else the HTTP method and path).
type exchangeLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *exchangeLog) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

// of returns the lines that begin with prefix.
func (l *exchangeLog) of(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

func (l *exchangeLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// recordingProxy returns a loopback server that forwards everything to
// target and records each exchange in the log.
func recordingProxy(t *testing.T, target string, log *exchangeLog) *httptest.Server {
	t.Helper()
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		what := r.Method + " " + r.URL.Path
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(b, &m) == nil && m.Method != "" {
				what = m.Method
			}
		}
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(rec, r)
		log.add(what + " " + strconv.Itoa(rec.status))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// statusWriter keeps the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestServeAuthStepUp: `tidemark serve --auth-tool-scope echo=mcp:tools`
// in front of the TypeScript SDK's example authorization server, which
// grants exactly the scopes a client asks for. The protected resource
// metadata lists no scopes_supported, so `tidemark connect --oauth-browser
// fetch` first obtains a token without mcp:tools; the server answers its
// echo call 403 insufficient_scope naming mcp:tools, the bridge authorizes
// again for it and sends the call again, which is answered 200, and the
// host sees only the result. The server sees exactly one 403 and then one
// 200 for the call (through a recording proxy at the resource URL).
func TestServeAuthStepUp(t *testing.T) {
	port := testenv.FreePort(t)
	direct := fmt.Sprintf("http://127.0.0.1:%d", port)
	var log exchangeLog
	proxy := recordingProxy(t, direct, &log)
	endpoint := proxy.URL + "/mcp"
	issuer := startTSAuthServer(t, endpoint)
	tidemark := testenv.BuildTidemark(t)
	serve := testenv.StartProcess(t, tidemark, "serve", "--addr", "127.0.0.1:"+strconv.Itoa(port), "--auth-resource", endpoint,
		"--auth-issuer", issuer, "--auth-introspection", issuer+"introspect", "--auth-tool-scope", "echo=mcp:tools")
	testenv.ServeURL(t, serve)

	resp, err := http.Get(proxy.URL + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"resource":"` + endpoint + `","authorization_servers":["` + issuer + `"],"bearer_methods_supported":["header"]}` + "\n"; string(meta) != want {
		t.Fatalf("protected resource metadata %s, want %s", meta, want)
	}

	text, token := bridgeEcho(t, tidemark, endpoint, t.TempDir(), "tide")
	if text != "tide" {
		t.Fatalf("echo through the bridge: %q, want tide", text)
	}
	if got, want := strings.Join(log.of("tools/call "), ", "), "tools/call 403, tools/call 200"; got != want {
		t.Fatalf("the server answered the calls: %s, want %s; every exchange:\n%s", got, want, log.String())
	}
	if got := log.of("initialize "); len(got) < 2 || got[0] != "initialize 401" || got[len(got)-1] != "initialize 200" {
		t.Fatalf("the server answered initialize: %v, want 401 first and 200 last; every exchange:\n%s", got, log.String())
	}

	// The token the bridge keeps is the stepped-up one: the issuer says it
	// carries mcp:tools.
	resp, err = http.PostForm(issuer+"introspect", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	var ti struct {
		Active bool   `json:"active"`
		Scope  string `json:"scope"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ti)
	resp.Body.Close()
	if err != nil || !ti.Active || ti.Scope != "mcp:tools" {
		t.Fatalf("introspection of the stored token: %+v, %v; want active with scope mcp:tools", ti, err)
	}
}
