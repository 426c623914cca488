package bearer_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark/bearer"
)

// issuer is a loopback authorization server the test controls: RFC 8414
// metadata, a JSON Web Key Set of the keys it publishes, and the count of
// key set fetches.
type issuer struct {
	srv     *httptest.Server
	keys    map[string]*rsa.PrivateKey // kid → key; published
	fetches atomic.Int64
}

func newIssuer(t *testing.T, kids ...string) *issuer {
	t.Helper()
	is := &issuer{keys: map[string]*rsa.PrivateKey{}}
	for _, kid := range kids {
		is.keys[kid] = newKey(t)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		var set jose.JSONWebKeySet
		for kid, k := range is.keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
		}
		json.NewEncoder(w).Encode(set)
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func newKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sign returns a JWT of claims signed by key under kid.
func sign(t *testing.T, key *rsa.PrivateKey, kid string, claims any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid).WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

const audience = "http://127.0.0.1:8080/mcp"

var now = time.Unix(1_800_000_000, 0)

func claims(is *issuer, change func(map[string]any)) map[string]any {
	c := map[string]any{
		"iss": is.srv.URL, "sub": "alice", "aud": audience,
		"exp": now.Add(time.Hour).Unix(), "nbf": now.Add(-time.Minute).Unix(), "scope": "mcp:tools files:read",
	}
	if change != nil {
		change(c)
	}
	return c
}

func newVerifier(t *testing.T, is *issuer) *bearer.Verifier {
	return newVerifierAt(t, is, func() time.Time { return now })
}

func newVerifierAt(t *testing.T, is *issuer, clock func() time.Time) *bearer.Verifier {
	t.Helper()
	v, err := bearer.New(bearer.Config{Issuer: is.srv.URL, Audience: audience, Now: clock, KeyRefresh: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestJWT: a JWT is verified against the key set the issuer's metadata
// names; each token that is not valid for this audience now is refused
// with ErrInvalidToken and a message saying why.
func TestJWT(t *testing.T) {
	is := newIssuer(t, "k1")
	v := newVerifier(t, is)
	ctx := context.Background()
	good := sign(t, is.keys["k1"], "k1", claims(is, nil))
	ti, err := v.Verify(ctx, good, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ti.UserID != "alice" || len(ti.Scopes) != 2 || ti.Scopes[0] != "mcp:tools" || ti.Scopes[1] != "files:read" || !ti.Expiration.Equal(now.Add(time.Hour)) {
		t.Fatalf("TokenInfo = %+v", ti)
	}
	other := newKey(t)
	for _, c := range []struct {
		name, token, want string
	}{
		{"other audience", sign(t, is.keys["k1"], "k1", claims(is, func(c map[string]any) { c["aud"] = "http://other/mcp" })),
			`invalid token: the token is for the audience "http://other/mcp", not "` + audience + `"`},
		{"expired beyond the skew", sign(t, is.keys["k1"], "k1", claims(is, func(c map[string]any) { c["exp"] = now.Add(-31 * time.Second).Unix() })),
			"invalid token: the token expired at " + now.Add(-31*time.Second).UTC().Format(time.RFC3339)},
		{"not yet valid", sign(t, is.keys["k1"], "k1", claims(is, func(c map[string]any) { c["nbf"] = now.Add(31 * time.Second).Unix() })),
			"invalid token: the token is not valid before " + now.Add(31*time.Second).UTC().Format(time.RFC3339)},
		{"other issuer", sign(t, is.keys["k1"], "k1", claims(is, func(c map[string]any) { c["iss"] = "http://evil" })),
			`invalid token: the token's issuer (iss) is "http://evil", not "` + is.srv.URL + `", the issuer this server accepts tokens from`},
		{"no issuer", sign(t, is.keys["k1"], "k1", claims(is, func(c map[string]any) { delete(c, "iss") })),
			`invalid token: the token has no iss claim (RFC 9068, section 2.2): this server accepts tokens of the issuer "` + is.srv.URL + `"`},
		{"no sub", sign(t, is.keys["k1"], "k1", claims(is, func(c map[string]any) { delete(c, "sub") })),
			"invalid token: the token has no sub claim (RFC 9068, section 2.2)"},
		{"unknown key", sign(t, other, "k9", claims(is, nil)),
			`invalid token: failed to verify signature: the token names the key "k9", which the issuer's key set does not hold (a key the issuer withdrew, or a token of another issuer)`},
		{"known kid, other key", sign(t, other, "k1", claims(is, nil)),
			"invalid token: failed to verify signature: no key of the issuer's key set verifies the signature"},
		{"opaque", "abc.def", "invalid token: the token is not a JWT, and no introspection endpoint is configured"},
		{"valid JWS in JSON serialization", jsonSerialized(good), "invalid token: the token is not a JWT signed with one asymmetric key"},
	} {
		_, err := v.Verify(ctx, c.token, nil)
		if !errors.Is(err, auth.ErrInvalidToken) || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Within the skew, expired and not-yet-valid tokens pass.
	for _, change := range []func(map[string]any){
		func(c map[string]any) { c["exp"] = now.Add(-29 * time.Second).Unix() },
		func(c map[string]any) { c["nbf"] = now.Add(29 * time.Second).Unix() },
	} {
		if _, err := v.Verify(ctx, sign(t, is.keys["k1"], "k1", claims(is, change)), nil); err != nil {
			t.Errorf("within the skew: %v", err)
		}
	}
}

// jsonSerialized returns the JWS of the compact JWT token in the JWS JSON
// serialization (RFC 7515, section 7.2), signature intact, with an
// unprotected header that brings its dots to two, as a JWT's: a JWT is
// compact only (RFC 7519, section 7.2).
func jsonSerialized(token string) string {
	p := strings.Split(token, ".")
	return `{"protected":"` + p[0] + `","header":{"x":"a.b."},"payload":"` + p[1] + `","signature":"` + p[2] + `"}`
}

// TestKeyRotation: a token naming a key the set does not hold fetches the
// set again, at most once per refresh interval (10 s here) however many
// such tokens come: a rotated key is found once the interval has passed
// since the last fetch, and a flood of unknown keys costs one fetch.
func TestKeyRotation(t *testing.T) {
	is := newIssuer(t, "k1")
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	at := func() time.Time { return time.Unix(0, clock.Load()) }
	v := newVerifierAt(t, is, at)
	ctx := context.Background()
	if _, err := v.Verify(ctx, sign(t, is.keys["k1"], "k1", claims(is, nil)), nil); err != nil {
		t.Fatal(err)
	}
	is.keys["k2"] = newKey(t) // rotation: k2 published
	rotated := sign(t, is.keys["k2"], "k2", claims(is, nil))
	stranger := newKey(t)
	for range 50 {
		if _, err := v.Verify(ctx, sign(t, stranger, "k9", claims(is, nil)), nil); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("unknown key: %v", err)
		}
		if _, err := v.Verify(ctx, rotated, nil); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("rotated key within the interval: %v, want refused", err)
		}
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("fetches after 100 tokens of unknown keys within the interval: %d, want 1", n)
	}
	clock.Add(int64(10 * time.Second))
	if _, err := v.Verify(ctx, rotated, nil); err != nil {
		t.Fatalf("token of the rotated key after the interval: %v", err)
	}
	if n := is.fetches.Load(); n != 2 {
		t.Fatalf("fetches after the rotated key: %d, want 2", n)
	}
}

// TestIssuerDown: an issuer that cannot be reached is ErrUnavailable, not
// an invalid token.
func TestIssuerDown(t *testing.T) {
	is := newIssuer(t, "k1")
	v := newVerifier(t, is)
	tok := sign(t, is.keys["k1"], "k1", claims(is, nil))
	is.srv.Close()
	_, err := v.Verify(context.Background(), tok, nil)
	if !errors.Is(err, bearer.ErrUnavailable) || errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("issuer down: %v, want ErrUnavailable", err)
	}
}
