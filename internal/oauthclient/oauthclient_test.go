package oauthclient

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// testServer is an MCP endpoint (/mcp) that wants "Bearer good", with
// its resource metadata and an authorization server on the same origin,
// whose metadata lists the code challenge methods given. It records the
// forms posted to /token and counts the requests to /authorize.
type testServer struct {
	*httptest.Server
	mu         sync.Mutex
	tokenForms []url.Values
	authorizes int
}

func newTestServer(t *testing.T, methods []string) *testServer {
	ts := &testServer{}
	mux := http.NewServeMux()
	asJSON := func(w http.ResponseWriter) { w.Header().Set("Content-Type", "application/json") }
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+ts.URL+`/.well-known/oauth-protected-resource/mcp"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		asJSON(w)
		json.NewEncoder(w).Encode(map[string]any{"resource": ts.URL + "/mcp", "authorization_servers": []string{ts.URL}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		asJSON(w)
		m := map[string]any{
			"issuer": ts.URL, "authorization_endpoint": ts.URL + "/authorize", "token_endpoint": ts.URL + "/token",
			"registration_endpoint": ts.URL + "/register", "response_types_supported": []string{"code"},
		}
		if methods != nil {
			m["code_challenge_methods_supported"] = methods
		}
		json.NewEncoder(w).Encode(m)
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		asJSON(w)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"client_id": "registered", "redirect_uris": []string{"http://127.0.0.1/callback"}})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.authorizes++
		ts.mu.Unlock()
		q := r.URL.Query()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code=c&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		ts.mu.Lock()
		ts.tokenForms = append(ts.tokenForms, r.PostForm)
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"good","token_type":"Bearer","expires_in":3600,"refresh_token":"r2"}`)
	})
	ts.Server = httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func newTransport(t *testing.T, server string) *Transport {
	t.Helper()
	tr, err := New(Config{Server: server, Browser: BrowserFetch, TokenDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func get(t *testing.T, tr *Transport, u string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Transport: tr}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An authorization server whose metadata does not list S256 is never
// sent the user: the request comes back with the server's 401 (MCP
// 2025-11-25, Authorization Code Protection). A list of plain alone is
// refused by fetchCode, an empty list already by the go-sdk's metadata
// check. With S256 listed, the same flow authorizes.
func TestPKCES256Required(t *testing.T) {
	for _, tc := range []struct {
		methods    []string
		status     int
		authorizes int
	}{
		{[]string{"plain"}, http.StatusUnauthorized, 0},
		{[]string{}, http.StatusUnauthorized, 0},
		{[]string{"S256"}, http.StatusOK, 1},
	} {
		ts := newTestServer(t, tc.methods)
		tr := newTransport(t, ts.URL+"/mcp")
		status, body := get(t, tr, ts.URL+"/mcp")
		if status != tc.status || ts.authorizes != tc.authorizes {
			t.Errorf("methods %v: HTTP %d %q after %d authorization requests, want HTTP %d after %d", tc.methods, status, body, ts.authorizes, tc.status, tc.authorizes)
		}
	}
}

// A stored token that has expired is refreshed at the first request, with
// the stored resource (RFC 8707) in the refresh request, and the new
// token is stored in place of the old one.
func TestRefreshSendsResourceAndStores(t *testing.T) {
	ts := newTestServer(t, []string{"S256"})
	server := ts.URL + "/mcp"
	dir := t.TempDir()
	s := store{dir: dir}
	if err := s.save(&Record{Server: server, Resource: server, ClientID: "registered", TokenURL: ts.URL + "/token",
		Token: &oauth2.Token{AccessToken: "old", TokenType: "Bearer", RefreshToken: "r1", Expiry: time.Now().Add(-time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	tr, err := New(Config{Server: server, Browser: BrowserFetch, TokenDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if status, body := get(t, tr, server); status != http.StatusOK || body != "ok" {
		t.Fatalf("HTTP %d %q, want 200 \"ok\"", status, body)
	}
	if len(ts.tokenForms) != 1 || ts.authorizes != 0 {
		t.Fatalf("%d token requests and %d authorizations, want one refresh and none", len(ts.tokenForms), ts.authorizes)
	}
	f := ts.tokenForms[0]
	if f.Get("grant_type") != "refresh_token" || f.Get("refresh_token") != "r1" || f.Get("resource") != server {
		t.Errorf("refresh request form = %v, want grant_type refresh_token, refresh_token r1, resource %s", f, server)
	}
	rec, err := s.load(server)
	if err != nil || rec == nil || rec.Token.AccessToken != "good" || rec.Token.RefreshToken != "r2" {
		t.Errorf("stored after the refresh: %+v, %v; want access token good, refresh token r2", rec, err)
	}
	if fi, err := os.Stat(s.path(server)); err != nil || fi.Mode().Perm() != fileMode {
		t.Errorf("token file mode: %v, %v; want %v", fi.Mode().Perm(), err, fileMode)
	}
}

// The token file's name keeps the host readable and two endpoints of one
// host apart.
func TestFileName(t *testing.T) {
	a, b := fileName("https://mcp.example.com:8443/mcp"), fileName("https://mcp.example.com:8443/other")
	if !strings.HasPrefix(a, "mcp.example.com_8443-") || !strings.HasSuffix(a, ".json") || len(a) != len("mcp.example.com_8443-")+16+len(".json") {
		t.Errorf("fileName = %q, want mcp.example.com_8443-<16 hex>.json", a)
	}
	if a == b {
		t.Errorf("two endpoints share the file %q", a)
	}
}

// testWriter writes log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
