package bearer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/tidemark-mcp/tidemark/bearer"
)

// BenchmarkVerify measures one Verifier.Verify of a valid JWT once the
// issuer's key set is cached: what every request of a resource server
// pays, with the token remembered from an earlier request (cached) and
// checked afresh (uncached: its first request, or CacheSize -1).
// tidemark-bench's `auth` row signs with ES256; RS256 is what most
// identity providers sign with.
func BenchmarkVerify(b *testing.B) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rs := newKey(b)
	for _, c := range []struct {
		name string
		alg  jose.SignatureAlgorithm
		key  any
		pub  any
		size int // Config.CacheSize
	}{
		{"ES256/cached", jose.ES256, ec, &ec.PublicKey, 0},
		{"ES256/uncached", jose.ES256, ec, &ec.PublicKey, -1},
		{"RS256/cached", jose.RS256, rs, &rs.PublicKey, 0},
		{"RS256/uncached", jose.RS256, rs, &rs.PublicKey, -1},
	} {
		b.Run(c.name, func(b *testing.B) {
			var url string
			mux := http.NewServeMux()
			mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
				json.NewEncoder(w).Encode(map[string]string{"issuer": url, "jwks_uri": url + "/jwks"})
			})
			mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
				json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: c.pub, KeyID: "k", Algorithm: string(c.alg), Use: "sig"}}})
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			url = srv.URL
			v, err := bearer.New(bearer.Config{Issuer: url, Audience: "https://mcp.example.com/mcp", CacheSize: c.size})
			if err != nil {
				b.Fatal(err)
			}
			s, err := jose.NewSigner(jose.SigningKey{Algorithm: c.alg, Key: c.key}, (&jose.SignerOptions{}).WithHeader("kid", "k").WithType("at+jwt"))
			if err != nil {
				b.Fatal(err)
			}
			token, err := jwt.Signed(s).Claims(map[string]any{"iss": url, "sub": "alice", "aud": "https://mcp.example.com/mcp",
				"exp": time.Now().Add(time.Hour).Unix(), "scope": "tools:echo"}).Serialize()
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := v.Verify(ctx, token, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, token, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
