package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
)

// jwtIssuer is an OAuth authorization server on loopback that publishes
// its RFC 8414 metadata and one ES256 key, and signs access tokens.
type jwtIssuer struct {
	url string
	key *ecdsa.PrivateKey
}

func startJWTIssuer(t *testing.T) *jwtIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	is := httptest.NewServer(mux)
	t.Cleanup(is.Close)
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": is.URL, "jwks_uri": is.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	return &jwtIssuer{url: is.URL, key: key}
}

// token returns an access token of the issuer for subject sub and
// audience aud, valid for an hour.
func (is *jwtIssuer) token(t *testing.T, sub, aud string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: is.key}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(map[string]any{"iss": is.url, "sub": sub, "aud": aud, "exp": time.Now().Add(time.Hour).Unix()}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestServeAuthRedis: `tidemark serve --auth-issuer` as two replicas of a
// fleet on a real redis-server, both with one resource URL (the
// audience). A session alice opens on one replica answers her call on the
// other; bob's valid token presenting alice's session id gets, on either
// replica, the very bytes of the 404 a session id that never existed
// gets, and alice's session still answers her afterwards.
func TestServeAuthRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	is := startJWTIssuer(t)
	tidemark := testenv.BuildTidemark(t)
	const resource = "https://mcp.example.com/mcp"
	var endpoints []string
	for _, id := range []string{"a", "b"} {
		port := testenv.FreePort(t)
		serve := testenv.StartProcess(t, tidemark, "serve", "--addr", "127.0.0.1:"+strconv.Itoa(port),
			"--redis", rs.URL(), "--replica-id", id, "--auth-issuer", is.url, "--auth-resource", resource)
		testenv.ServeURL(t, serve)
		endpoints = append(endpoints, fmt.Sprintf("http://127.0.0.1:%d/mcp", port))
	}
	alice, bob := is.token(t, "alice", resource), is.token(t, "bob", resource)

	status, _, session, body := rawPost(t, endpoints[0], alice, "", initializeBody)
	if status != http.StatusOK || session == "" {
		t.Fatalf("initialize with alice's token: %d %s", status, body)
	}
	rawPost(t, endpoints[0], alice, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	for i, ep := range endpoints {
		if status, _, _, body := rawPost(t, ep, alice, session, call); status != http.StatusOK || !strings.Contains(body, `"text":"x"`) {
			t.Fatalf("alice's call on replica %d: %d %s", i, status, body)
		}
	}
	const want = `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"session is unknown: send initialize to start a new session","data":{"reason":"session_not_found"}}}`
	for i, ep := range endpoints {
		status, _, _, stolen := rawPost(t, ep, bob, session, call)
		unknownStatus, _, _, unknown := rawPost(t, ep, bob, strings.Repeat("0", len(session)), call)
		if status != http.StatusNotFound || unknownStatus != http.StatusNotFound || stolen != unknown || stolen != want {
			t.Errorf("replica %d: bob's token with alice's session: %d %s; a session that never existed: %d %s; want 404 %s",
				i, status, stolen, unknownStatus, unknown, want)
		}
	}
	if status, _, _, body := rawPost(t, endpoints[1], alice, session, call); status != http.StatusOK || !strings.Contains(body, `"text":"x"`) {
		t.Fatalf("alice's call after bob's attempts: %d %s", status, body)
	}
}
