package upstream_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/oauth2"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
)

// TestTokenSourceSessionless: with Options.TokenSource, a sessionless
// request reaches the upstream with the gateway's token, not the
// client's; when no token can be obtained, nothing reaches the upstream
// and the client gets 503 upstream_unreachable with the request's id.
func TestTokenSourceSessionless(t *testing.T) {
	var mu sync.Mutex
	var seen [][]string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Values("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":7,"result":{}}`)
	}))
	defer up.Close()
	post := func(src oauth2.TokenSource) *httptest.ResponseRecorder {
		e, err := upstream.New(upstream.Options{URL: up.URL + "/mcp", TokenSource: src})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Authorization", "Bearer client-token")
		rec := httptest.NewRecorder()
		e.Sessionless().ServeHTTP(rec, req)
		return rec
	}
	if rec := post(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "gateway-token", TokenType: "Bearer"})); rec.Code != http.StatusOK {
		t.Fatalf("with the gateway's token: %d %s", rec.Code, rec.Body)
	}
	rec := post(failingSource{})
	const want = `"data":{"reason":"upstream_unreachable"}`
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"id":7`) || !strings.Contains(rec.Body.String(), want) {
		t.Errorf("without a token: %d %s, want 503 with id 7 and %s", rec.Code, rec.Body, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := [][]string{{"Bearer gateway-token"}}; !slices.EqualFunc(seen, want, slices.Equal) {
		t.Errorf("the upstream saw Authorization %q, want %q", seen, want)
	}
}

type failingSource struct{}

func (failingSource) Token() (*oauth2.Token, error) { return nil, errors.New("token endpoint refused") }

// TestTokenSourceExcludesAuthorization: with Options.TokenSource, Header
// and Forward may not name Authorization.
func TestTokenSourceExcludesAuthorization(t *testing.T) {
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "t"})
	for _, opts := range []upstream.Options{
		{URL: "http://127.0.0.1:1/mcp", TokenSource: src, Header: http.Header{"Authorization": {"Bearer x"}}},
		{URL: "http://127.0.0.1:1/mcp", TokenSource: src, Forward: []string{"authorization"}},
	} {
		const want = "upstream: header Authorization carries the gateway's own token (TokenSource) and cannot be forwarded or added too"
		if _, err := upstream.New(opts); err == nil || err.Error() != want {
			t.Errorf("New(%+v): %v, want %q", opts, err, want)
		}
	}
}
