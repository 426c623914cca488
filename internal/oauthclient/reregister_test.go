package oauthclient

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// forgetfulServer is an MCP endpoint (/mcp) with an authorization server
// on the same origin that keeps its registered clients and its tokens in
// memory, so that forget (a restart) loses them. A client it does not
// know gets invalid_client: HTTP 400 from /authorize when checkAuthorize
// is set (else /authorize redirects with a code whatever the client), and
// HTTP 401 from /token (RFC 6749, section 5.2). Clients are registered
// as client-1, client-2, ...; tokens expire after expiresIn seconds until
// the first forget, then after an hour.
type forgetfulServer struct {
	*httptest.Server
	checkAuthorize bool
	expiresIn      int
	refuseAll      bool // refuse every client at /token, even a new one

	mu            sync.Mutex
	clients       map[string]bool
	tokens        map[string]bool
	registrations int
	authorizes    []string // the client_id of each /authorize request
	tokenRequests []string // the grant_type and client_id of each /token request
	n             int
}

func newForgetfulServer(t *testing.T, checkAuthorize bool, expiresIn int) *forgetfulServer {
	fs := &forgetfulServer{checkAuthorize: checkAuthorize, expiresIn: expiresIn, clients: map[string]bool{}, tokens: map[string]bool{}}
	mux := http.NewServeMux()
	asJSON := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	invalidClient := map[string]string{"error": "invalid_client", "error_description": "Invalid client_id"}
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		fs.mu.Lock()
		ok := fs.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		fs.mu.Unlock()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+fs.URL+`/.well-known/oauth-protected-resource/mcp"`)
			asJSON(w, http.StatusUnauthorized, map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{
				"code": -32000, "message": "obtain a new token for this server", "data": map[string]string{"reason": "token_invalid"}}})
			return
		}
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		asJSON(w, http.StatusOK, map[string]any{"resource": fs.URL + "/mcp", "authorization_servers": []string{fs.URL}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		asJSON(w, http.StatusOK, map[string]any{
			"issuer": fs.URL, "authorization_endpoint": fs.URL + "/authorize", "token_endpoint": fs.URL + "/token",
			"registration_endpoint": fs.URL + "/register", "response_types_supported": []string{"code"},
			"code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"client_secret_post", "none"},
		})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		var meta struct {
			RedirectURIs []string `json:"redirect_uris"`
		}
		json.NewDecoder(r.Body).Decode(&meta)
		fs.mu.Lock()
		fs.registrations++
		id := "client-" + strconv.Itoa(fs.registrations)
		fs.clients[id] = true
		fs.mu.Unlock()
		asJSON(w, http.StatusCreated, map[string]any{"client_id": id, "redirect_uris": meta.RedirectURIs, "token_endpoint_auth_method": "none"})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		fs.mu.Lock()
		fs.authorizes = append(fs.authorizes, q.Get("client_id"))
		known := fs.clients[q.Get("client_id")]
		fs.mu.Unlock()
		if fs.checkAuthorize && !known {
			asJSON(w, http.StatusBadRequest, invalidClient)
			return
		}
		http.Redirect(w, r, q.Get("redirect_uri")+"?code=c&state="+q.Get("state"), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		id := r.PostForm.Get("client_id")
		fs.mu.Lock()
		fs.tokenRequests = append(fs.tokenRequests, r.PostForm.Get("grant_type")+" "+id)
		known := fs.clients[id] && !fs.refuseAll
		expiresIn := fs.expiresIn
		fs.n++
		tok := "tok-" + strconv.Itoa(fs.n)
		if known {
			fs.tokens[tok] = true
		}
		fs.mu.Unlock()
		if !known {
			asJSON(w, http.StatusUnauthorized, invalidClient)
			return
		}
		asJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": expiresIn, "refresh_token": "r-" + tok})
	})
	fs.Server = httptest.NewServer(mux)
	t.Cleanup(fs.Close)
	return fs
}

// forget loses every client and token, as an authorization server that
// keeps them in memory does when it restarts.
func (fs *forgetfulServer) forget() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.clients, fs.tokens = map[string]bool{}, map[string]bool{}
	fs.authorizes, fs.tokenRequests = nil, nil
	fs.expiresIn = 3600
}

// counts returns the registrations so far, and the /authorize and /token
// requests since the last forget.
func (fs *forgetfulServer) counts() (int, []string, []string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.registrations, append([]string(nil), fs.authorizes...), append([]string(nil), fs.tokenRequests...)
}

// storedClient returns the client_id of the token file of tr's server, ""
// when there is none.
func storedClient(t *testing.T, tr *Transport) string {
	t.Helper()
	b, err := os.ReadFile(tr.TokenFile())
	if os.IsNotExist(err) {
		return ""
	}
	var rec Record
	if err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("token file %s: %v %s", tr.TokenFile(), err, b)
	}
	return rec.ClientID
}

// When the authorization server forgets the client the transport
// registered (it restarted), the next refusal leads to one new
// registration and one authorization with it, within the same request;
// the token file then holds the new client. Whether the authorization
// endpoint refuses the old client_id (HTTP 400 invalid_client) or only
// the token endpoint does (HTTP 401 invalid_client at the code's
// exchange), the old client is tried once. With a token that expires at
// once (within oauth2's 10 s of margin), the refresh meets the refusal
// first, and the old client is not sent to /authorize at all.
func TestReRegisterWhenClientForgotten(t *testing.T) {
	for _, tc := range []struct {
		name           string
		checkAuthorize bool
		expiresIn      int
		authorizes     []string
		tokenRequests  []string
	}{
		{"authorize refuses", true, 3600, []string{"client-1", "client-2"}, []string{"authorization_code client-2"}},
		{"token refuses", false, 3600, []string{"client-1", "client-2"}, []string{"authorization_code client-1", "authorization_code client-2"}},
		{"refresh refuses", true, 1, []string{"client-2"}, []string{"refresh_token client-1", "authorization_code client-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newForgetfulServer(t, tc.checkAuthorize, tc.expiresIn)
			tr := newTransport(t, fs.URL+"/mcp")
			if status, body := get(t, tr, fs.URL+"/mcp"); status != http.StatusOK || body != "ok" {
				t.Fatalf("first request: HTTP %d %q, want 200 ok", status, body)
			}
			if c := storedClient(t, tr); c != "client-1" {
				t.Fatalf("token file client %q after the first authorization, want client-1", c)
			}
			fs.forget()
			if status, body := get(t, tr, fs.URL+"/mcp"); status != http.StatusOK || body != "ok" {
				t.Fatalf("after the authorization server forgot the client: HTTP %d %q, want 200 ok", status, body)
			}
			regs, authorizes, tokens := fs.counts()
			if regs != 2 || !equal(authorizes, tc.authorizes) || !equal(tokens, tc.tokenRequests) {
				t.Errorf("%d registrations, /authorize for %q, /token %q; want 2, %q, %q", regs, authorizes, tokens, tc.authorizes, tc.tokenRequests)
			}
			if c := storedClient(t, tr); c != "client-2" {
				t.Errorf("token file client %q, want client-2", c)
			}
			if status, _ := get(t, tr, fs.URL+"/mcp"); status != http.StatusOK {
				t.Errorf("third request: HTTP %d, want 200", status)
			}
		})
	}
}

// An authorization server that refuses the new client too gets one new
// registration per refusal, not a loop; the token file of the refused
// client is removed; and the host reads what it can do, with the
// server's reason kept.
func TestReRegisterOncePerRefusal(t *testing.T) {
	fs := newForgetfulServer(t, false, 3600)
	tr := newTransport(t, fs.URL+"/mcp")
	if status, _ := get(t, tr, fs.URL+"/mcp"); status != http.StatusOK {
		t.Fatalf("first request: HTTP %d, want 200", status)
	}
	fs.forget()
	fs.mu.Lock()
	fs.refuseAll = true
	fs.mu.Unlock()
	resp, err := (&http.Client{Transport: tr}).Get(fs.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	regs, authorizes, tokens := fs.counts()
	if regs != 2 || len(authorizes) != 2 || len(tokens) != 2 {
		t.Errorf("%d registrations, /authorize %q, /token %q; want 2, two and two", regs, authorizes, tokens)
	}
	var got struct {
		Error struct {
			Message string
			Data    struct{ Reason string }
		}
	}
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &got) != nil ||
		got.Error.Data.Reason != "token_invalid" ||
		!strings.HasPrefix(got.Error.Message, "tidemark connect could not obtain a token from the MCP server's authorization server, so the call was not run: token exchange failed: oauth2: ") ||
		!strings.HasSuffix(got.Error.Message, `"invalid_client" "Invalid client_id". Send the call again to authorize again (with --oauth-browser open or print, complete the authorization in the browser within 5 minutes); if it keeps failing, check the authorization server, and the --oauth-client-id given to tidemark connect, if any`) {
		t.Errorf("refusal: HTTP %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if c := storedClient(t, tr); c != "" {
		t.Errorf("token file holds client %q, want no file", c)
	}
}

// A client the user registered (Config.ClientID) is never replaced by a
// registration: its refusal is the user's to mend.
func TestPreRegisteredClientNotReplaced(t *testing.T) {
	fs := newForgetfulServer(t, true, 3600)
	tr, err := New(Config{Server: fs.URL + "/mcp", ClientID: "mine", Browser: BrowserFetch, TokenDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	status, _ := get(t, tr, fs.URL+"/mcp")
	regs, authorizes, _ := fs.counts()
	if status != http.StatusUnauthorized || regs != 0 || !equal(authorizes, []string{"mine"}) {
		t.Errorf("HTTP %d after %d registrations and /authorize for %q; want 401 after none and [mine]", status, regs, authorizes)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// person opens each authorization URL printed to it, as a person at a
// browser does, and notes the client_id of each.
type person struct {
	mu      sync.Mutex
	clients []string
}

func (p *person) Write(b []byte) (int, error) {
	for _, line := range strings.Split(string(b), "\n") {
		u, err := url.Parse(line)
		if err != nil || !strings.HasPrefix(line, "http") {
			continue
		}
		p.mu.Lock()
		p.clients = append(p.clients, u.Query().Get("client_id"))
		p.mu.Unlock()
		go func() {
			if resp, err := http.Get(line); err == nil {
				resp.Body.Close()
			}
		}()
	}
	return len(b), nil
}

// With --oauth-browser print (and open), a person would see the
// authorization endpoint's refusal of a forgotten client in the browser,
// and the bridge would wait for a redirect that never comes: the
// bridge's own request to the authorization URL finds the refusal first,
// and the person is shown only the URL of the new client.
func TestReRegisterBeforeThePerson(t *testing.T) {
	fs := newForgetfulServer(t, true, 3600)
	p := &person{}
	tr, err := New(Config{Server: fs.URL + "/mcp", Browser: BrowserPrint, Prompt: p, TokenDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if status, _ := get(t, tr, fs.URL+"/mcp"); status != http.StatusOK {
		t.Fatalf("first request: HTTP %d, want 200", status)
	}
	fs.forget()
	// A bridge that waited for the person would wait AuthorizeTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fs.URL+"/mcp", nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the authorization server forgot the client: HTTP %d, want 200", resp.StatusCode)
	}
	regs, authorizes, _ := fs.counts()
	p.mu.Lock()
	shown := p.clients
	p.mu.Unlock()
	if regs != 2 || !equal(shown, []string{"client-1", "client-2"}) || !equal(authorizes, []string{"client-1", "client-2"}) {
		t.Errorf("%d registrations, URLs shown for %q, /authorize for %q since the restart; want 2, [client-1 client-2], [client-1 client-2]", regs, shown, authorizes)
	}
}
