package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// zitadelOP is the zitadel/oidc example OpenID provider run by a test:
// its issuer identifier (http://localhost:PORT/, as the example builds
// it) and the redirect URI its clients are registered with.
type zitadelOP struct {
	issuer, redirect string
	codes            chan url.Values // the query of each request to redirect
	proc             *testenv.Process
}

// startZitadelOP runs the example provider (testenv.ZitadelOP) on a free
// loopback port, its clients registered with a loopback redirect URI that
// the test serves, and returns once its OpenID Connect discovery document
// is served.
func startZitadelOP(t *testing.T) *zitadelOP {
	t.Helper()
	bin := testenv.ZitadelOP(t)
	op := &zitadelOP{codes: make(chan url.Values, 1)}
	callback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case op.codes <- r.URL.Query():
		default:
		}
		io.WriteString(w, "signed in")
	}))
	t.Cleanup(callback.Close)
	op.redirect = callback.URL + "/callback"
	port := strconv.Itoa(testenv.FreePort(t))
	op.issuer = "http://localhost:" + port + "/"
	cmd := exec.Command(bin)
	// The example reads its port and its clients' redirect URIs from the
	// environment (example/server/config.FromEnvVars).
	cmd.Env = append(os.Environ(), "PORT="+port, "REDIRECT_URI="+op.redirect)
	op.proc = testenv.StartCmd(t, cmd)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(op.issuer + ".well-known/openid-configuration")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return op
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the zitadel example provider did not serve its discovery document within 60 s; output:\n%s", op.proc.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// loginForm is the example's login page: a form whose hidden id field
// names the authorization request.
var loginForm = regexp.MustCompile(`<form method="POST" action="/login/username"[^>]*>\s*<input type="hidden" name="id" value="([^"]+)">`)

// signIn runs the authorization code flow with PKCE (RFC 7636) for the
// example's confidential client "web" as a browser and its user would:
// it opens the authorization URL, fills in the login form with username
// and password, follows the redirects to the loopback redirect URI, and
// exchanges the code. It returns the access token, which the example
// issues opaque (encrypted) to every client it registers.
func (op *zitadelOP) signIn(t *testing.T, username, password string) string {
	t.Helper()
	verifier := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	auth := op.issuer + "auth?" + url.Values{
		"client_id": {"web"}, "response_type": {"code"}, "redirect_uri": {op.redirect}, "scope": {"openid"},
		"state": {"tide"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}.Encode()
	resp, err := http.Get(auth)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := loginForm.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET the authorization URL: %d, want 200 and the login form; page:\n%s", resp.StatusCode, page)
	}
	resp, err = http.PostForm(op.issuer+"login/username", url.Values{"id": {string(m[1])}, "username": {username}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(page) != "signed in" {
		t.Fatalf("POST the login form as %s: %d %s, want the redirect URI's page", username, resp.StatusCode, page)
	}
	var q url.Values
	select {
	case q = <-op.codes:
	default:
		t.Fatal("the redirect URI was not called")
	}
	if q.Get("state") != "tide" || q.Get("code") == "" {
		t.Fatalf("the redirect URI got %v, want a code and state=tide", q)
	}
	tok := op.token(t, url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")},
		"redirect_uri": {op.redirect}, "code_verifier": {verifier}})
	return tok.AccessToken
}

// exchange asks for a JWT naming audience in aud in place of the access
// token subject (RFC 8693): the example issues a JWT signed with the key
// at its jwks_uri only as requested_token_type id_token (its access
// tokens are opaque, and it refuses requested_token_type jwt), with aud
// holding audience and the client, and sub when scope asks for openid. A
// user who is not an administrator needs an actor_token: the user's own
// access token (delegation).
func (op *zitadelOP) exchange(t *testing.T, subject, actor, audience string) string {
	t.Helper()
	form := url.Values{
		"grant_type":    {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token": {subject}, "subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:id_token"},
		"audience":             {audience}, "scope": {"openid"},
	}
	if actor != "" {
		form.Set("actor_token", actor)
		form.Set("actor_token_type", "urn:ietf:params:oauth:token-type:access_token")
	}
	tok := op.token(t, form)
	if tok.IssuedTokenType != "urn:ietf:params:oauth:token-type:id_token" || strings.Count(tok.AccessToken, ".") != 2 {
		t.Fatalf("token exchange issued %q, want an id_token JWT", tok.IssuedTokenType)
	}
	return tok.AccessToken
}

// tokenAnswer is a token endpoint's answer (RFC 6749, section 5.1; RFC
// 8693, section 2.2.1).
type tokenAnswer struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
}

// token posts form to the token endpoint as the client "web" (HTTP Basic).
func (op *zitadelOP) token(t *testing.T, form url.Values) tokenAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, op.issuer+"oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("web", "secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var tok tokenAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &tok) != nil || tok.AccessToken == "" {
		t.Fatalf("token endpoint, grant %s: %d %s", form.Get("grant_type"), resp.StatusCode, body)
	}
	return tok
}

// bearerTransport sends every request with Authorization: Bearer token.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestServeAuthZitadel: `tidemark serve --auth-issuer` in front of the
// zitadel/oidc example OpenID provider, found by OpenID Connect discovery
// (it serves no RFC 8414 metadata). A user signs in through its login
// form (authorization code with PKCE), and a token exchange turns the
// opaque access token into a JWT signed with the key at its jwks_uri and
// naming the MCP endpoint in aud: with it the go-sdk client initializes
// and calls echo. The opaque token itself, a JWT for another audience and
// one signed by a key the provider does not publish (same kid and iss)
// get 401 invalid_token; a second user's JWT presenting the first user's
// session gets the very 404 of a session that never existed.
//
// An expired token is not tried: the example's JWTs live one hour
// (storage.Client.IDTokenLifetime) and no request shortens that;
// TestServeAuthJWT covers expiry with a token it signs itself.
func TestServeAuthZitadel(t *testing.T) {
	op := startZitadelOP(t)
	port := testenv.FreePort(t)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	serve := testenv.StartProcess(t, testenv.BuildTidemark(t), "serve", "--addr", "127.0.0.1:"+strconv.Itoa(port),
		"--auth-issuer", op.issuer)
	testenv.ServeURL(t, serve)
	metadata := fmt.Sprintf("http://127.0.0.1:%d/.well-known/oauth-protected-resource/mcp", port)

	// The example names its first user test-user@HOST, HOST that of its
	// issuer (storage.NewUserStore); both users' password is verysecure.
	opaqueA := op.signIn(t, "test-user@localhost", "verysecure")
	alice := op.exchange(t, opaqueA, "", endpoint)
	header, claims := jwtParts(t, alice)
	if header["alg"] != "RS256" || claims["iss"] != op.issuer || claims["sub"] != "id1" ||
		fmt.Sprint(claims["aud"]) != fmt.Sprint([]any{endpoint, "web"}) {
		t.Fatalf("the exchanged JWT: header %v, claims %v; want RS256, iss %s, sub id1, aud [%s web]", header, claims, op.issuer, endpoint)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearerTransport{alice}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "zitadel-test", Version: "1.0.0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("initialize with the exchanged JWT: %v; tidemark log:\n%s", err, serve.Output())
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "tide"}})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("tools/call echo: %+v, %v", res, err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "tide" {
		t.Fatalf("echo answered %q, want tide", text)
	}

	stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged := func() string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: stranger}, (&jose.SignerOptions{}).WithHeader("kid", header["kid"]).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(s).Claims(claims).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}()
	for _, c := range []struct{ name, token, why string }{
		{"the opaque access token", opaqueA, "the token is not a JWT, and no introspection endpoint is configured"},
		{"another audience", op.exchange(t, opaqueA, "", "http://127.0.0.1:1/mcp"),
			`the token is for the audience \"http://127.0.0.1:1/mcp web\", not \"` + endpoint + `\"`},
		{"a key the provider does not publish", forged,
			"failed to verify signature: no key of the issuer's key set verifies the signature"},
	} {
		status, challenge, _, body := rawPost(t, endpoint, c.token, "", initializeBody)
		want := `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the bearer token is not valid here (` + c.why +
			`): obtain a new token for this server","data":{"reason":"token_invalid"}}}`
		if status != http.StatusUnauthorized || challenge != `Bearer error="invalid_token", resource_metadata="`+metadata+`"` || body != want {
			t.Errorf("%s: %d %q\n%s\nwant 401\n%s", c.name, status, challenge, body, want)
		}
	}

	// test-user2 is no administrator, so the example exchanges its token
	// only with an actor (storage.Storage.ValidateTokenExchangeRequest).
	opaqueB := op.signIn(t, "test-user2", "verysecure")
	bob := op.exchange(t, opaqueB, opaqueB, endpoint)
	if _, c := jwtParts(t, bob); c["sub"] != "id2" {
		t.Fatalf("the second user's JWT names sub %v, want id2", c["sub"])
	}
	// A session of protocol 2025-11-25: the go-sdk client negotiates
	// 2026-07-28, which has none.
	status, _, session, body := rawPost(t, endpoint, alice, "", initializeBody)
	if status != http.StatusOK || session == "" {
		t.Fatalf("initialize with the first user's JWT: %d %s", status, body)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	status, _, _, stolen := rawPost(t, endpoint, bob, session, call)
	_, _, _, unknown := rawPost(t, endpoint, bob, strings.Repeat("0", len(session)), call)
	if status != http.StatusNotFound || stolen != unknown ||
		stolen != `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"session is unknown: send initialize to start a new session","data":{"reason":"session_not_found"}}}` {
		t.Fatalf("the second user's JWT with the first user's session: %d %s; a session that never existed: %s", status, stolen, unknown)
	}
	if status, _, _, body := rawPost(t, endpoint, alice, session, call); status != http.StatusOK || !strings.Contains(body, `"text":"x"`) {
		t.Fatalf("the first user's own session: %d %s", status, body)
	}
	if out := serve.Output(); strings.Contains(out, alice) || strings.Contains(out, bob) || strings.Contains(out, opaqueA) {
		t.Fatalf("tidemark serve logged a token:\n%s", out)
	}
}

// jwtParts returns the header and the claims of the compact JWT token,
// unverified.
func jwtParts(t *testing.T, token string) (map[string]string, map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	var header map[string]string
	var claims map[string]any
	for i, v := range []any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(b, v) != nil {
			t.Fatalf("part %d of the JWT is not base64url JSON: %v", i, err)
		}
	}
	return header, claims
}
