// Package bearer makes an MCP endpoint an OAuth 2.1 resource server (MCP
// 2025-11-25, basic/authorization): it verifies the access token a
// request carries and says who it acts for, as a go-sdk auth.TokenVerifier
// (Verifier.Verify), and supplies the texts around it: the Authorization
// header's token (ParseAuthorization), the WWW-Authenticate challenge of a
// refusal (Challenge), the authorization server's metadata
// (ParseServerMetadata, Discover) and this resource's own (RFC 9728,
// ResourceMetadata).
//
// A token is verified one of two ways:
//   - a JWT (RFC 9068) by its signature, against the issuer's JSON Web Key
//     Set (found through the issuer's metadata, or Config.JWKSURL), then
//     its claims: iss equal to the issuer, aud holding the audience, exp
//     and nbf within Config.Skew of the clock, sub present;
//   - any other token, or any token when no key set is known, through the
//     issuer's token introspection (RFC 7662), whose answer must say
//     active, name this audience in aud, and be unexpired.
//
// The package imports nothing of Tidemark.
package bearer

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Defaults of Config.
const (
	// DefaultSkew is how far a token's exp and nbf may be from this
	// process's clock: clocks of hosts synchronised by NTP differ by far
	// less, and a token is usually valid for minutes to hours.
	DefaultSkew = 30 * time.Second
	// DefaultKeyRefresh is the least time between two fetches of the key
	// set that tokens naming unknown keys prompt.
	DefaultKeyRefresh = 10 * time.Second
	// DefaultKeyMaxAge is how long a fetched key set is used before the
	// next token fetches it again: a key the issuer withdraws stops
	// verifying within it, even when no token names an unknown key.
	DefaultKeyMaxAge = 5 * time.Minute
	// DefaultTimeout bounds each request to the authorization server.
	DefaultTimeout = 10 * time.Second
	// DefaultCacheSize is how many verified tokens a Verifier remembers:
	// about 200 bytes each, so 2 MB at most, and more than the clients
	// one process serves at once hold.
	DefaultCacheSize = 10_000
)

// Config configures a Verifier.
type Config struct {
	// Issuer is the authorization server's issuer identifier (RFC 8414,
	// section 2), exactly as its tokens' iss claim and its metadata carry
	// it. Required.
	Issuer string
	// Audience is this resource's identifier: a token must name it in its
	// aud claim (MCP 2025-11-25, basic/authorization, "Token Audience
	// Binding and Validation"; RFC 8707). It is compared as a string, a
	// trailing slash aside (oauthex.MatchesResource). Required.
	Audience string
	// JWKSURL is the URL of the issuer's JSON Web Key Set; empty: the
	// jwks_uri of the issuer's metadata, discovered at the first JWT.
	JWKSURL string
	// IntrospectionURL is the issuer's token introspection endpoint (RFC
	// 7662); empty: tokens are verified as JWTs only.
	IntrospectionURL string
	// ClientID and ClientSecret authenticate this resource server to the
	// introspection endpoint with HTTP Basic (RFC 7662, section 2.1; RFC
	// 6749, section 2.3.1); empty ClientID: no authentication.
	ClientID, ClientSecret string
	// Skew is the tolerance of exp and nbf. Default DefaultSkew; negative:
	// none.
	Skew time.Duration
	// KeyRefresh is the least time between two fetches of the key set
	// that tokens naming unknown keys, or failing the signature check of
	// a held key, prompt. Default DefaultKeyRefresh.
	KeyRefresh time.Duration
	// KeyMaxAge is how long a fetched key set is used before the next
	// token fetches it again (a failed fetch keeps it). Default
	// DefaultKeyMaxAge.
	KeyMaxAge time.Duration
	// HTTPClient makes the requests to the authorization server. Default:
	// a client with a DefaultTimeout timeout.
	HTTPClient *http.Client
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// CacheSize is how many verified tokens are remembered, so that a
	// token sent again is not checked again: a JWT until its exp (plus
	// Skew) or until the key set changes, whichever comes first; an
	// introspected token for IntrospectionCache. Invalid tokens are never
	// remembered. Default DefaultCacheSize; negative: none.
	CacheSize int
	// IntrospectionCache is how long an active introspection answer is
	// trusted before the authorization server is asked again, bounded by
	// the answer's exp: a token revoked at the authorization server is
	// refused here at most this late (RFC 7662, section 4). Default zero:
	// every request asks.
	IntrospectionCache time.Duration
}

// Verifier verifies access tokens issued by one issuer for one audience.
// Its methods are safe for concurrent use.
type Verifier struct {
	cfg Config

	cache *tokenCache // nil: none

	mu          sync.Mutex
	keys        *keySet   // nil until known
	noKeys      bool      // the issuer's metadata lists no jwks_uri
	discovered  time.Time // when discovery last failed
	discoverErr error     // why it failed then
}

// New returns a Verifier for cfg. It fetches nothing: the issuer's
// metadata and keys are fetched at the first token that needs them (see
// Discover to check them at start).
func New(cfg Config) (*Verifier, error) {
	if _, err := MetadataURLs(cfg.Issuer); err != nil {
		return nil, err
	}
	if cfg.Audience == "" {
		return nil, errors.New("bearer: an audience is required: the resource identifier tokens must be issued for")
	}
	for _, u := range [...]struct{ name, v string }{{"key set URL", cfg.JWKSURL}, {"introspection URL", cfg.IntrospectionURL}} {
		if u.v != "" && !isHTTPURL(u.v) {
			return nil, fmt.Errorf("bearer: %s %q: want an absolute http(s) URL", u.name, u.v)
		}
	}
	if cfg.Skew == 0 {
		cfg.Skew = DefaultSkew
	}
	cfg.Skew = max(cfg.Skew, 0)
	if cfg.KeyRefresh <= 0 {
		cfg.KeyRefresh = DefaultKeyRefresh
	}
	if cfg.KeyMaxAge <= 0 {
		cfg.KeyMaxAge = DefaultKeyMaxAge
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: DefaultTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	cfg.IntrospectionCache = max(cfg.IntrospectionCache, 0)
	v := &Verifier{cfg: cfg, cache: newTokenCache(cfg.CacheSize)}
	if cfg.JWKSURL != "" {
		v.keys = v.newKeySet(cfg.JWKSURL)
	}
	return v, nil
}

func (v *Verifier) newKeySet(url string) *keySet {
	ks := &keySet{url: url, client: v.cfg.HTTPClient, refresh: v.cfg.KeyRefresh, maxAge: v.cfg.KeyMaxAge, now: v.cfg.Now}
	ks.verifier = oidc.NewVerifier(v.cfg.Issuer, ks, &oidc.Config{
		// The issuer, audience, exp and nbf are checked by verifyJWT and
		// tokenInfo, with the configured skew and resource comparison,
		// and refusals that speak of an access token (go-oidc's speak
		// of an ID token).
		SkipClientIDCheck: true, SkipExpiryCheck: true, SkipIssuerCheck: true,
		SupportedSigningAlgs: algNames(),
	})
	return ks
}

func algNames() []string {
	names := make([]string, len(signingAlgs))
	for i, a := range signingAlgs {
		names[i] = string(a)
	}
	return names
}

// Verify implements auth.TokenVerifier: it returns who token acts for
// (UserID: the sub claim, else for an introspected token its client_id),
// its scopes and its expiry. Errors: one wrapping auth.ErrInvalidToken
// when the token is not valid for this audience now (its message says
// why, and never holds the token), one wrapping ErrUnavailable when the
// authorization server could not be asked. A token verified before is
// answered from the cache (Config.CacheSize) while that finding stands.
func (v *Verifier) Verify(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	digest := sha256.Sum256([]byte(token))
	if info, ok := v.cache.get(digest, v.cfg.Now(), v.keyEpoch()); ok {
		return info, nil
	}
	if strings.Count(token, ".") == 2 {
		ks, err := v.keySet(ctx)
		if err != nil && v.cfg.IntrospectionURL == "" {
			return nil, err
		}
		if ks != nil {
			info, epoch, err := v.verifyJWT(ctx, ks, token)
			if err == nil {
				v.cache.put(digest, info, info.Expiration.Add(v.cfg.Skew), epoch)
			}
			return info, err
		}
	}
	if v.cfg.IntrospectionURL == "" {
		return nil, invalid("the token is not a JWT, and no introspection endpoint is configured")
	}
	asked := v.cfg.Now()
	info, err := v.introspect(ctx, token)
	if err == nil && v.cfg.IntrospectionCache > 0 {
		until := asked.Add(v.cfg.IntrospectionCache)
		if exp := info.Expiration.Add(v.cfg.Skew); !info.Expiration.IsZero() && exp.Before(until) {
			until = exp
		}
		v.cache.put(digest, info, until, 0)
	}
	return info, err
}

// keyEpoch returns the epoch of the key set held now (keySet.epoch);
// zero when none is known yet.
func (v *Verifier) keyEpoch() uint64 {
	v.mu.Lock()
	ks := v.keys
	v.mu.Unlock()
	if ks == nil {
		return 0
	}
	return ks.epoch.Load()
}

// keySet returns the issuer's key set, discovering its URL when
// Config.JWKSURL is empty; nil when the issuer's metadata lists none.
// A failed discovery is tried again at most once per KeyRefresh.
func (v *Verifier) keySet(ctx context.Context) (*keySet, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys != nil || v.noKeys {
		return v.keys, nil
	}
	if !v.discovered.IsZero() && v.cfg.Now().Sub(v.discovered) < v.cfg.KeyRefresh {
		return nil, fmt.Errorf("%w: its metadata could not be read less than %v ago: %w", ErrUnavailable, v.cfg.KeyRefresh, v.discoverErr)
	}
	m, err := Discover(ctx, v.cfg.HTTPClient, v.cfg.Issuer)
	if err != nil {
		v.discovered, v.discoverErr = v.cfg.Now(), err
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if m.JWKSURI == "" {
		v.noKeys = true
		return nil, nil
	}
	v.keys = v.newKeySet(m.JWKSURI)
	return v.keys, nil
}

// Discover fetches the issuer's metadata and key set now, when tokens
// will need them, and returns why it could not; a resource server calls
// it at start to report a wrong issuer or an unreachable one early.
func (v *Verifier) Discover(ctx context.Context) error {
	ks, err := v.keySet(ctx)
	if err != nil || ks == nil {
		return err
	}
	return ks.ensure(ctx, "", false)
}

// claims are the claims of an access token a resource server reads (RFC
// 9068, section 2.2; RFC 8693, section 4.2 for scope; scp as Microsoft
// Entra ID and others send it).
type claims struct {
	Issuer    string       `json:"iss"`
	Subject   string       `json:"sub"`
	ClientID  string       `json:"client_id"`
	Audience  stringList   `json:"aud"`
	Expiry    *json.Number `json:"exp"`
	NotBefore *json.Number `json:"nbf"`
	Scope     string       `json:"scope"`
	Scp       stringList   `json:"scp"`
}

// stringList is a claim that is one string or an array of strings.
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = strings.Fields(one)
		if len(*s) == 0 {
			*s = nil
		}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or an array of strings")
	}
	*s = many
	return nil
}

// verifyJWT checks token, a JWS in the compact serialization, the only
// one a JWT has (RFC 7519, section 7.2), and its signature against ks
// (fetching the set when it lacks the token's key), its issuer (go-oidc), then its claims. It
// also returns the key set's epoch read before the signature check, so
// that a key set changed during the check voids the finding.
func (v *Verifier) verifyJWT(ctx context.Context, ks *keySet, token string) (*auth.TokenInfo, uint64, error) {
	jws, err := jose.ParseSignedCompact(token, signingAlgs)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, 0, invalid("the token is not a JWT signed with one asymmetric key")
	}
	kid := jws.Signatures[0].Header.KeyID
	if err := ks.ensure(ctx, kid, false); err != nil {
		return nil, 0, err
	}
	epoch := ks.epoch.Load()
	var sig sigFailure
	idt, err := ks.verifier.Verify(context.WithValue(ctx, sigFailureKey{}, &sig), token)
	if err != nil && sig.failed.Load() {
		// No held key verified it: the issuer may have replaced a key
		// under the same ID, or signs without IDs. Fetch the set again
		// (at most once per KeyRefresh) and check once more.
		if err := ks.ensure(ctx, kid, true); err != nil {
			return nil, 0, err
		}
		if now := ks.epoch.Load(); now != epoch {
			epoch = now
			idt, err = ks.verifier.Verify(ctx, token)
		}
	}
	if err != nil {
		return nil, 0, invalid(strings.TrimPrefix(err.Error(), "oidc: "))
	}
	var c claims
	if err := idt.Claims(&c); err != nil {
		return nil, 0, invalid("the token's claims cannot be read: " + err.Error())
	}
	if err := v.checkIssuer(c.Issuer, true); err != nil {
		return nil, 0, err
	}
	if c.Subject == "" {
		return nil, 0, invalid("the token has no sub claim (RFC 9068, section 2.2)")
	}
	if c.Expiry == nil {
		return nil, 0, invalid("the token has no exp claim (RFC 9068, section 2.2)")
	}
	info, err := v.tokenInfo(&c, c.Subject)
	return info, epoch, err
}

// checkIssuer checks iss, the issuer a token names, against the
// configured one, exactly (RFC 9068, section 4: iss must match the
// authorization server's issuer identifier; RFC 8414, section 2). A
// token without iss is refused when required is set (a JWT access token
// must carry one: RFC 9068, section 2.2); an introspection answer may
// leave it out (RFC 7662, section 2.2). The refusal names both issuers,
// neither of which is a secret: the configured one is in the protected
// resource metadata, and iss is clipped.
func (v *Verifier) checkIssuer(iss string, required bool) error {
	switch {
	case iss == "" && required:
		return invalid(fmt.Sprintf("the token has no iss claim (RFC 9068, section 2.2): this server accepts tokens of the issuer %q", v.cfg.Issuer))
	case iss != "" && iss != v.cfg.Issuer:
		return invalid(fmt.Sprintf("the token's issuer (iss) is %q, not %q, the issuer this server accepts tokens from", clip(iss), v.cfg.Issuer))
	}
	return nil
}

// tokenInfo checks c's audience, expiry and start, and returns the
// TokenInfo of a token that acts for user.
func (v *Verifier) tokenInfo(c *claims, user string) (*auth.TokenInfo, error) {
	if !oauthex.MatchesResource(c.Audience, v.cfg.Audience) {
		return nil, invalid(fmt.Sprintf("the token is for the audience %q, not %q", clip(strings.Join(c.Audience, " ")), v.cfg.Audience))
	}
	now := v.cfg.Now()
	var exp time.Time
	if c.Expiry != nil {
		t, err := numericDate(*c.Expiry)
		if err != nil {
			return nil, invalid("exp: " + err.Error())
		}
		if !now.Before(t.Add(v.cfg.Skew)) {
			return nil, invalid("the token expired at " + t.UTC().Format(time.RFC3339))
		}
		exp = t
	}
	if c.NotBefore != nil {
		t, err := numericDate(*c.NotBefore)
		if err != nil {
			return nil, invalid("nbf: " + err.Error())
		}
		if now.Add(v.cfg.Skew).Before(t) {
			return nil, invalid("the token is not valid before " + t.UTC().Format(time.RFC3339))
		}
	}
	scopes := strings.Fields(c.Scope)
	if len(scopes) == 0 {
		scopes = c.Scp
	}
	return &auth.TokenInfo{UserID: user, Scopes: scopes, Expiration: exp}, nil
}

// numericDate reads a NumericDate (RFC 7519, section 2): seconds since
// the epoch, possibly with a fraction.
func numericDate(n json.Number) (time.Time, error) {
	f, err := n.Float64()
	if err != nil || f < 0 || f > 1<<40 {
		return time.Time{}, errors.New("not a NumericDate")
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)), nil
}

// invalid returns an error wrapping auth.ErrInvalidToken that says why.
func invalid(why string) error {
	return fmt.Errorf("%w: %s", auth.ErrInvalidToken, why)
}
