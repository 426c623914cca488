package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// The `auth` row runs `tidemark serve` as an OAuth 2.1 resource server
// (--auth-issuer) in front of an authorization server the benchmark runs
// itself on loopback: its metadata (RFC 8414) names a JSON Web Key Set
// of one ES256 key, and it signs the one access token every request of
// the load generator carries (Authorization: Bearer). Tidemark fetches
// the key set once and verifies the token's signature, issuer, audience,
// expiry and scope on every request: that verification is what the row
// measures against the `tidemark` row.

// Placeholders of the `auth` row's arguments.
const (
	issuerPlaceholder = "{auth-issuer}" // the loopback issuer's URL
	// benchAudience is the audience of the token, given to tidemark serve
	// as --auth-audience: one token serves every process, whatever its
	// port.
	benchAudience = "urn:tidemark-bench:mcp"
	// benchScope is the scope --auth-tool-scope asks of a call of
	// countdown, which the token carries: every call is also checked for
	// its tool's scope.
	benchScope = "bench:call"
)

// authIssuer is the loopback authorization server, started at the first
// server that needs it and stopped by stop.
type authIssuer struct {
	once  sync.Once
	err   error
	srv   *http.Server
	url   string
	token string // the access token, a JWT
}

// start serves the issuer's metadata and key set on a free loopback port
// and signs the token (valid for a day), once; it returns the issuer's
// URL and the token.
func (a *authIssuer) start() (string, string, error) {
	a.once.Do(func() { a.err = a.serve() })
	return a.url, a.token, a.err
}

func (a *authIssuer) serve() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	a.url = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"issuer": a.url, "jwks_uri": a.url + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "bench", Algorithm: "ES256", Use: "sig"}}})
	})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(ln)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "bench").WithType("at+jwt"))
	if err != nil {
		return err
	}
	now := time.Now()
	a.token, err = jwt.Signed(signer).Claims(map[string]any{
		"iss": a.url, "sub": "bench-user", "aud": benchAudience, "iat": now.Unix(), "exp": now.Add(24 * time.Hour).Unix(), "scope": benchScope,
	}).Serialize()
	if err != nil {
		return fmt.Errorf("signing the benchmark's access token: %w", err)
	}
	return nil
}

// stop ends the issuer, if it was started.
func (a *authIssuer) stop() {
	if a.srv != nil {
		a.srv.Close()
	}
}
