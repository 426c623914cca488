package bearer_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark/bearer"
)

// clock is a test clock that moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(now.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestCachedJWTExpires: a remembered JWT is refused once its exp plus the
// skew has passed, exactly as one checked afresh.
func TestCachedJWTExpires(t *testing.T) {
	is := newIssuer(t, "k1")
	clk := newClock()
	v := newVerifierAt(t, is, clk.Now)
	ctx := context.Background()
	exp := now.Add(time.Minute)
	tok := sign(t, is.keys["k1"], "k1", claims(is, func(c map[string]any) { c["exp"] = exp.Unix() }))
	for range 2 {
		if _, err := v.Verify(ctx, tok, nil); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute + 29*time.Second)
	if _, err := v.Verify(ctx, tok, nil); err != nil {
		t.Fatalf("within the skew after exp: %v", err)
	}
	clk.Advance(time.Second)
	_, err := v.Verify(ctx, tok, nil)
	if want := "invalid token: the token expired at " + exp.UTC().Format(time.RFC3339); !errors.Is(err, auth.ErrInvalidToken) || err.Error() != want {
		t.Fatalf("30 s after exp: %v, want %q", err, want)
	}
}

// TestCachedJWTKeyRemoved: when the issuer withdraws the key a remembered
// JWT was signed with, the token is refused from the first fetch that
// finds the key gone; a token of a key still held keeps passing.
func TestCachedJWTKeyRemoved(t *testing.T) {
	is := newIssuer(t, "k1", "k2")
	clk := newClock()
	v := newVerifierAt(t, is, clk.Now)
	ctx := context.Background()
	withdrawn := sign(t, is.keys["k1"], "k1", claims(is, nil))
	kept := sign(t, is.keys["k2"], "k2", claims(is, nil))
	for _, tok := range []string{withdrawn, kept} {
		if _, err := v.Verify(ctx, tok, nil); err != nil {
			t.Fatal(err)
		}
	}
	delete(is.keys, "k1") // compromised: withdrawn
	is.keys["k3"] = newKey(t)
	clk.Advance(10 * time.Second)
	if _, err := v.Verify(ctx, sign(t, is.keys["k3"], "k3", claims(is, nil)), nil); err != nil {
		t.Fatalf("token of the new key: %v", err)
	}
	if n := is.fetches.Load(); n != 2 {
		t.Fatalf("key set fetches: %d, want 2", n)
	}
	_, err := v.Verify(ctx, withdrawn, nil)
	if want := `invalid token: failed to verify signature: the token names the key "k1", which the issuer's key set does not hold (a key the issuer withdrew, or a token of another issuer)`; !errors.Is(err, auth.ErrInvalidToken) || err.Error() != want {
		t.Fatalf("remembered token of the withdrawn key: %v, want %q", err, want)
	}
	if ti, err := v.Verify(ctx, kept, nil); err != nil || ti.UserID != "alice" {
		t.Fatalf("token of a kept key: %+v, %v", ti, err)
	}
}

// introspector is a loopback introspection endpoint that says every token
// in active is active for the audience, until exp, issued by itself (its
// URL), and counts the questions it is asked.
type introspector struct {
	srv    *httptest.Server
	active map[string]int64 // token → exp (Unix seconds)
	asked  atomic.Int64
}

func newIntrospector(t *testing.T, active map[string]int64) *introspector {
	t.Helper()
	in := &introspector{active: active}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.asked.Add(1)
		exp, ok := in.active[r.PostFormValue("token")]
		if !ok {
			json.NewEncoder(w).Encode(map[string]any{"active": false})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"active": true, "iss": in.srv.URL, "sub": "bob", "aud": audience, "exp": exp, "scope": "mcp:tools"})
	}))
	t.Cleanup(in.srv.Close)
	return in
}

// TestIntrospectionCache: an active answer is trusted for
// IntrospectionCache, bounded by the token's exp; an inactive one is
// asked again each time; with no cache, or a cache of no entries, every
// request asks.
func TestIntrospectionCache(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		window    time.Duration
		size      int
		exp       time.Time
		advance   time.Duration // between the second and the third question
		wantAsked int64         // after three Verify calls of the same token
	}{
		{"cached for the window", time.Minute, 0, now.Add(time.Hour), 59 * time.Second, 1},
		{"asked again after the window", time.Minute, 0, now.Add(time.Hour), time.Minute, 2},
		{"no window: every request asks", 0, 0, now.Add(time.Hour), 0, 3},
		{"no cache: every request asks", time.Minute, -1, now.Add(time.Hour), 0, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := newIntrospector(t, map[string]int64{"opaque-1": c.exp.Unix()})
			clk := newClock()
			v, err := bearer.New(bearer.Config{Issuer: in.srv.URL, Audience: audience, IntrospectionURL: in.srv.URL, JWKSURL: in.srv.URL + "/jwks",
				Now: clk.Now, IntrospectionCache: c.window, CacheSize: c.size})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if i == 2 {
					clk.Advance(c.advance)
				}
				ti, err := v.Verify(ctx, "opaque-1", nil)
				if err != nil {
					t.Fatalf("question %d: %v", i+1, err)
				}
				if ti.UserID != "bob" || len(ti.Scopes) != 1 || ti.Scopes[0] != "mcp:tools" {
					t.Fatalf("TokenInfo = %+v", ti)
				}
			}
			if n := in.asked.Load(); n != c.wantAsked {
				t.Fatalf("introspection requests: %d, want %d", n, c.wantAsked)
			}
		})
	}
	t.Run("the token's exp bounds the window", func(t *testing.T) {
		exp := now.Add(10 * time.Second)
		in := newIntrospector(t, map[string]int64{"opaque-1": exp.Unix()})
		clk := newClock()
		v, err := bearer.New(bearer.Config{Issuer: in.srv.URL, Audience: audience, IntrospectionURL: in.srv.URL, JWKSURL: in.srv.URL + "/jwks",
			Now: clk.Now, IntrospectionCache: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(ctx, "opaque-1", nil); err != nil {
			t.Fatal(err)
		}
		clk.Advance(40 * time.Second) // exp plus the 30 s skew
		_, err = v.Verify(ctx, "opaque-1", nil)
		if want := "invalid token: the token expired at " + exp.UTC().Format(time.RFC3339); !errors.Is(err, auth.ErrInvalidToken) || err.Error() != want {
			t.Fatalf("after exp: %v, want %q", err, want)
		}
		if n := in.asked.Load(); n != 2 {
			t.Fatalf("introspection requests: %d, want 2", n)
		}
	})
	t.Run("inactive tokens are never remembered", func(t *testing.T) {
		in := newIntrospector(t, map[string]int64{})
		v, err := bearer.New(bearer.Config{Issuer: in.srv.URL, Audience: audience, IntrospectionURL: in.srv.URL, JWKSURL: in.srv.URL + "/jwks",
			Now: func() time.Time { return now }, IntrospectionCache: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			_, err := v.Verify(ctx, "revoked", nil)
			if want := "invalid token: the authorization server says the token is not active"; !errors.Is(err, auth.ErrInvalidToken) || err.Error() != want {
				t.Fatalf("inactive token: %v, want %q", err, want)
			}
		}
		if n := in.asked.Load(); n != 3 {
			t.Fatalf("introspection requests: %d, want 3", n)
		}
	})
}

// TestCachedTokenInfoIsACopy: what one caller does to the TokenInfo it
// is given never reaches the next caller of the same token.
func TestCachedTokenInfoIsACopy(t *testing.T) {
	is := newIssuer(t, "k1")
	v := newVerifier(t, is)
	tok := sign(t, is.keys["k1"], "k1", claims(is, nil))
	first, err := v.Verify(context.Background(), tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	first.UserID, first.Scopes[0] = "mallory", "admin"
	second, err := v.Verify(context.Background(), tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.UserID != "alice" || second.Scopes[0] != "mcp:tools" || second.Scopes[1] != "files:read" {
		t.Fatalf("second TokenInfo = %+v", second)
	}
}

// TestKeyReplacedUnderSameID: an issuer that replaces its key under the
// same key ID (or signs without key IDs) is fetched again when a token
// fails the held key's check, at most once per refresh interval; the
// new key's tokens then pass, and tokens of the replaced key, remembered
// or not, are refused.
func TestKeyReplacedUnderSameID(t *testing.T) {
	for _, kid := range []string{"k1", ""} {
		t.Run("kid="+kid, func(t *testing.T) {
			is := newIssuer(t, kid)
			clk := newClock()
			v := newVerifierAt(t, is, clk.Now)
			ctx := context.Background()
			old := sign(t, is.keys[kid], kid, claims(is, nil))
			if _, err := v.Verify(ctx, old, nil); err != nil {
				t.Fatal(err)
			}
			is.keys[kid] = newKey(t) // replaced under the same ID
			fresh := sign(t, is.keys[kid], kid, claims(is, func(c map[string]any) { c["sub"] = "carol" }))
			clk.Advance(9 * time.Second)
			if _, err := v.Verify(ctx, fresh, nil); !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("new key's token within the interval: %v, want refused", err)
			}
			clk.Advance(time.Second)
			if ti, err := v.Verify(ctx, fresh, nil); err != nil || ti.UserID != "carol" {
				t.Fatalf("new key's token after the interval: %+v, %v", ti, err)
			}
			if n := is.fetches.Load(); n != 2 {
				t.Fatalf("key set fetches: %d, want 2", n)
			}
			_, err := v.Verify(ctx, old, nil)
			if want := "invalid token: failed to verify signature: no key of the issuer's key set verifies the signature"; !errors.Is(err, auth.ErrInvalidToken) || err.Error() != want {
				t.Fatalf("replaced key's remembered token: %v, want %q", err, want)
			}
		})
	}
}

// TestKeySetMaxAge: a key set five minutes old is fetched again at the
// next token, so a withdrawn key stops verifying even when no token names
// an unknown key; when that fetch fails, the keys held still serve.
func TestKeySetMaxAge(t *testing.T) {
	is := newIssuer(t, "k1", "k2")
	clk := newClock()
	v := newVerifierAt(t, is, clk.Now)
	ctx := context.Background()
	withdrawn := sign(t, is.keys["k1"], "k1", claims(is, nil))
	kept := sign(t, is.keys["k2"], "k2", claims(is, nil))
	for _, tok := range []string{withdrawn, kept} {
		if _, err := v.Verify(ctx, tok, nil); err != nil {
			t.Fatal(err)
		}
	}
	delete(is.keys, "k1")
	clk.Advance(5*time.Minute - time.Second)
	if _, err := v.Verify(ctx, withdrawn, nil); err != nil {
		t.Fatalf("withdrawn key's token before the set is 5 minutes old: %v, want it still passing", err)
	}
	clk.Advance(time.Second)
	if _, err := v.Verify(ctx, sign(t, is.keys["k2"], "k2", claims(is, func(c map[string]any) { c["sub"] = "erin" })), nil); err != nil {
		t.Fatalf("kept key's new token: %v", err)
	}
	if n := is.fetches.Load(); n != 2 {
		t.Fatalf("key set fetches: %d, want 2", n)
	}
	if _, err := v.Verify(ctx, withdrawn, nil); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("withdrawn key's token after the fetch: %v, want refused", err)
	}
	if _, err := v.Verify(ctx, kept, nil); err != nil {
		t.Fatalf("kept key's remembered token: %v", err)
	}
	is.srv.Close()
	clk.Advance(5 * time.Minute)
	if ti, err := v.Verify(ctx, sign(t, is.keys["k2"], "k2", claims(is, func(c map[string]any) { c["sub"] = "dave" })), nil); err != nil || ti.UserID != "dave" {
		t.Fatalf("issuer down at the age's fetch: %+v, %v; want the held key to serve", ti, err)
	}
}

// TestIntrospectionOtherIssuer: an active introspection answer naming
// another issuer than the configured one is an invalid token, whose
// message names both issuers.
func TestIntrospectionOtherIssuer(t *testing.T) {
	in := newIntrospector(t, map[string]int64{"opaque-1": now.Add(time.Hour).Unix()})
	v, err := bearer.New(bearer.Config{Issuer: "http://idp.example", Audience: audience, IntrospectionURL: in.srv.URL, JWKSURL: in.srv.URL + "/jwks", Now: newClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), "opaque-1", nil)
	want := `invalid token: the token's issuer (iss) is "` + in.srv.URL + `", not "http://idp.example", the issuer this server accepts tokens from`
	if !errors.Is(err, auth.ErrInvalidToken) || err == nil || err.Error() != want {
		t.Fatalf("a token of another issuer: %v, want %q", err, want)
	}
}
