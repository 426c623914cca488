package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// TestServeAuthJWT: `tidemark serve --auth-issuer` verifies JWTs against
// the key set a loopback issuer publishes (found through its RFC 8414
// metadata). A token for this server passes; one for another audience,
// an expired one and one signed by a key the issuer does not publish
// each get 401 invalid_token with a body that says why; a token without
// the scope --auth-tool-scope asks for gets 403 insufficient_scope naming
// it, and with it the call is answered.
func TestServeAuthJWT(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	mux := http.NewServeMux()
	is := httptest.NewServer(mux)
	defer is.Close()
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": is.URL, "jwks_uri": is.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})

	port := testenv.FreePort(t)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	serve := testenv.StartProcess(t, testenv.BuildTidemark(t), "serve", "--addr", "127.0.0.1:"+strconv.Itoa(port),
		"--auth-issuer", is.URL, "--auth-tool-scope", "echo=tools:echo")
	testenv.ServeURL(t, serve)
	metadata := fmt.Sprintf("http://127.0.0.1:%d/.well-known/oauth-protected-resource/mcp", port)

	now := time.Now()
	token := func(signer *ecdsa.PrivateKey, change func(map[string]any)) string {
		c := map[string]any{"iss": is.URL, "sub": "alice", "aud": endpoint, "exp": now.Add(time.Hour).Unix(), "scope": "tools:other"}
		if change != nil {
			change(c)
		}
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: signer}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("at+jwt"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(s).Claims(c).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	expired := now.Add(-time.Minute).Unix()
	for _, c := range []struct{ name, token, why string }{
		{"another audience", token(key, func(c map[string]any) { c["aud"] = "http://127.0.0.1:1/mcp" }),
			`the token is for the audience \"http://127.0.0.1:1/mcp\", not \"` + endpoint + `\"`},
		{"another issuer", token(key, func(c map[string]any) { c["iss"] = "http://127.0.0.1:1" }),
			`the token's issuer (iss) is \"http://127.0.0.1:1\", not \"` + is.URL + `\", the issuer this server accepts tokens from`},
		{"no issuer", token(key, func(c map[string]any) { delete(c, "iss") }),
			`the token has no iss claim (RFC 9068, section 2.2): this server accepts tokens of the issuer \"` + is.URL + `\"`},
		{"expired", token(key, func(c map[string]any) { c["exp"] = expired }),
			"the token expired at " + time.Unix(expired, 0).UTC().Format(time.RFC3339)},
		{"unknown key", token(stranger, nil),
			"failed to verify signature: no key of the issuer's key set verifies the signature"},
	} {
		status, challenge, _, body := rawPost(t, endpoint, c.token, "", initializeBody)
		want := `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"the bearer token is not valid here (` + c.why +
			`): obtain a new token for this server","data":{"reason":"token_invalid"}}}`
		if status != http.StatusUnauthorized || challenge != `Bearer error="invalid_token", resource_metadata="`+metadata+`"` || body != want {
			t.Errorf("%s: %d %q\n%s\nwant 401\n%s", c.name, status, challenge, body, want)
		}
	}

	alice := token(key, nil)
	status, _, session, body := rawPost(t, endpoint, alice, "", initializeBody)
	if status != http.StatusOK || session == "" {
		t.Fatalf("initialize with a valid token: %d %s", status, body)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	status, challenge, _, body := rawPost(t, endpoint, alice, session, call)
	if status != http.StatusForbidden || challenge != `Bearer error="insufficient_scope", scope="tools:echo", resource_metadata="`+metadata+`"` ||
		body != `{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"the bearer token lacks the scope \"tools:echo\", which a call of the tool \"echo\" needs: authorize again asking for it","data":{"reason":"insufficient_scope"}}}` {
		t.Fatalf("a call without the tool's scope: %d %q %s", status, challenge, body)
	}
	stepped := token(key, func(c map[string]any) { c["scope"] = "tools:other tools:echo" })
	if status, _, _, body := rawPost(t, endpoint, stepped, session, call); status != http.StatusOK {
		t.Fatalf("the call with the scope: %d %s", status, body)
	}
}

// TestServeAuthWrongIssuer: an --auth-issuer whose host answers with no
// metadata for it, or with metadata naming another issuer (a missing
// trailing slash), is a configuration error that `tidemark serve` refuses
// at start with exit status 2 and one line saying what to set, instead
// of answering every token 503 for ever.
func TestServeAuthWrongIssuer(t *testing.T) {
	mux := http.NewServeMux()
	is := httptest.NewServer(mux)
	defer is.Close()
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": is.URL + "/", "jwks_uri": is.URL + "/jwks"})
	})
	bin := testenv.BuildTidemark(t)
	for _, c := range []struct{ issuer, want string }{
		{is.URL, fmt.Sprintf(`tidemark serve: --auth-issuer %q: bearer: the issuer URL does not name this authorization server: its metadata names the issuer %q, not %q: set the issuer URL to exactly that`,
			is.URL, is.URL+"/", is.URL)},
		{is.URL + "/realms/x", fmt.Sprintf(`tidemark serve: --auth-issuer %q: bearer: the issuer URL does not name this authorization server: no authorization server metadata for %s at %s/.well-known/oauth-authorization-server/realms/x, %s/.well-known/openid-configuration/realms/x, %s/realms/x/.well-known/openid-configuration`,
			is.URL+"/realms/x", is.URL+"/realms/x", is.URL, is.URL, is.URL)},
	} {
		cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--log-level", "WARN", "--auth-issuer", c.issuer)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("--auth-issuer %s: %v, want exit status 2", c.issuer, err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("--auth-issuer %s: still serving after 30 s; stderr:\n%s", c.issuer, stderr.String())
		}
		if got := strings.TrimSpace(stderr.String()); got != c.want {
			t.Errorf("--auth-issuer %s: stderr\n%s\nwant\n%s", c.issuer, got, c.want)
		}
	}
}
