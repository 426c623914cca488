package main

// The flags of `tidemark serve` that make it an OAuth 2.1 resource server
// (README, "Authorization"; package bearer).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/bearer"
)

// authConfig holds the --auth-* flags.
type authConfig struct {
	issuer        string
	audience      string
	resource      string
	jwks          string
	introspection string
	clientID      string
	secretFile    string            // --auth-introspection-client-secret-file
	introCache    time.Duration     // --auth-introspection-cache
	toolScopes    map[string]string // --auth-tool-scope TOOL=SCOPE
	secret        string            // resolved by check
}

// secretEnv is the variable that may hold the introspection client
// secret itself.
const secretEnv = envPrefix + "AUTH_INTROSPECTION_CLIENT_SECRET"

func authFlags(fs *flag.FlagSet, c *authConfig) {
	c.toolScopes = map[string]string{}
	fs.StringVar(&c.issuer, "auth-issuer", "", "require a bearer token issued by this OAuth authorization server on every MCP request: its issuer identifier, whose metadata (RFC 8414, else OpenID Connect discovery) names its keys (URL; empty: no authorization)")
	fs.StringVar(&c.audience, "auth-audience", "", "with --auth-issuer: the audience tokens must name in aud (URI; empty: the resource URL, --auth-resource)")
	fs.StringVar(&c.resource, "auth-resource", "", "with --auth-issuer: the URL clients reach the MCP endpoint at, named in the protected resource metadata (RFC 9728) and its challenges (URL; empty: http://ADDR/PATH of --addr, with the port listened on, and --path; required when --addr listens on every interface)")
	fs.StringVar(&c.jwks, "auth-jwks", "", "with --auth-issuer: the issuer's JSON Web Key Set that JWTs are verified against (URL; empty: the jwks_uri of the issuer's metadata)")
	fs.StringVar(&c.introspection, "auth-introspection", "", "with --auth-issuer: the issuer's token introspection endpoint (RFC 7662), which verifies tokens that are not JWTs (URL; empty: JWTs only)")
	fs.StringVar(&c.clientID, "auth-introspection-client-id", "", "with --auth-introspection: the client ID this server authenticates to it with (HTTP Basic); its secret is in --auth-introspection-client-secret-file (empty: no authentication)")
	fs.StringVar(&c.secretFile, "auth-introspection-client-secret-file", "", "with --auth-introspection-client-id: file whose first line is the client secret; $"+secretEnv+" may hold the secret itself (path; empty: $"+secretEnv+")")
	fs.DurationVar(&c.introCache, "auth-introspection-cache", 0, "with --auth-introspection: how long an active introspection answer is trusted before the issuer is asked again, bounded by the token's exp; a token revoked at the issuer is refused here at most this late (duration; 0: every request asks)")
	fs.Func("auth-tool-scope", "with --auth-issuer: TOOL=SCOPE, a tools/call of TOOL needs SCOPE, else 403 insufficient_scope names it (repeatable; the demo server refuses a TOOL it does not have at start, a gateway's tools are not checked)", func(kv string) error {
		tool, scope, ok := strings.Cut(kv, "=")
		if !ok || tool == "" || scope == "" || strings.ContainsAny(scope, " \"\\") {
			return fmt.Errorf("want TOOL=SCOPE, a scope without spaces or quotes, not %q", kv)
		}
		c.toolScopes[tool] = scope
		return nil
	})
}

// check refuses --auth-* values that cannot work, and resolves the
// introspection client secret (never shown in an error).
func (c *authConfig) check(lookup func(string) (string, bool)) error {
	envSecret, inEnv := lookup(secretEnv)
	if c.issuer == "" {
		return nil // its flags are refused without it by checkOnlyWith
	}
	if _, err := bearer.MetadataURLs(c.issuer); err != nil {
		return fmt.Errorf("--auth-issuer %q: want the issuer identifier, an absolute http:// or https:// URL without query or fragment", c.issuer)
	}
	for _, f := range [...]struct{ name, v, what string }{
		{"auth-resource", c.resource, "the MCP endpoint as clients reach it"},
		{"auth-jwks", c.jwks, "the issuer's JSON Web Key Set"},
		{"auth-introspection", c.introspection, "the issuer's introspection endpoint"},
	} {
		if f.v != "" {
			if err := checkHTTPURL(f.name, f.v, f.what); err != nil {
				return err
			}
		}
	}
	switch {
	case c.introCache < 0:
		return fmt.Errorf("--auth-introspection-cache %v: want a duration of zero (every request asks) or more", c.introCache)
	case c.secretFile != "" && inEnv:
		return fmt.Errorf("the introspection client secret is named by $%s and --auth-introspection-client-secret-file: want one of them", secretEnv)
	case (c.secretFile != "" || inEnv) && c.clientID == "":
		return errors.New("an introspection client secret needs its client: want --auth-introspection-client-id too")
	}
	c.secret = envSecret
	if c.secretFile != "" {
		if err := checkFile("auth-introspection-client-secret-file", c.secretFile, "a file holding the introspection client secret"); err != nil {
			return err
		}
		text, err := os.ReadFile(c.secretFile)
		if err != nil {
			return fmt.Errorf("--auth-introspection-client-secret-file %q: %v", c.secretFile, errors.Unwrap(err))
		}
		c.secret, _, _ = strings.Cut(string(text), "\n")
		c.secret = strings.TrimSuffix(c.secret, "\r")
	}
	return nil
}

// resourceURL returns the URL clients reach the endpoint at: --auth-resource,
// else http://ADDR/PATH of the listener ln.
func (c *authConfig) resourceURL(ln net.Addr, path string) (string, error) {
	if c.resource != "" {
		return c.resource, nil
	}
	host, port, _ := net.SplitHostPort(ln.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return "", errors.New("--auth-issuer: --addr listens on every interface, so the URL clients reach this server at is unknown: set --auth-resource to it, e.g. https://mcp.example.com/mcp")
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// options returns the Handler's Auth of the flags, nil without
// --auth-issuer, for a server listening on ln at path. It asks the issuer
// for its metadata and keys once, logging why when it cannot: tokens
// are verified all the same once it answers.
func (c *authConfig) options(ln net.Addr, path string, logger *slog.Logger) (*tidemark.Auth, error) {
	if c.issuer == "" {
		return nil, nil
	}
	resource, err := c.resourceURL(ln, path)
	if err != nil {
		return nil, err
	}
	audience := c.audience
	if audience == "" {
		audience = resource
	}
	v, err := bearer.New(bearer.Config{
		Issuer: c.issuer, Audience: audience, JWKSURL: c.jwks,
		IntrospectionURL: c.introspection, ClientID: c.clientID, ClientSecret: c.secret,
		IntrospectionCache: c.introCache,
	})
	if err != nil {
		return nil, err
	}
	mdURL, _ := bearer.ResourceMetadataURL(resource)
	attrs := []any{"issuer", c.issuer, "audience", audience, "resource_metadata", mdURL}
	ctx, cancel := context.WithTimeout(context.Background(), bearer.DefaultTimeout)
	defer cancel()
	err = v.Discover(ctx)
	if errors.Is(err, bearer.ErrMisconfigured) && c.introspection == "" {
		// Every token would be answered 503 for ever: a wrong issuer URL is
		// no outage to wait out.
		return nil, fmt.Errorf("--auth-issuer %q: %s", c.issuer, strings.TrimPrefix(err.Error(), bearer.ErrUnavailable.Error()+": "))
	}
	if err != nil && (c.jwks != "" || c.introspection == "") {
		logger.Warn("authorization server not reached at start; tokens are verified once it answers", append(attrs, "error", err)...)
	} else {
		logger.Info("authorization", attrs...)
	}
	// The metadata lists no scopes_supported: every request needs none,
	// so a client's first authorization asks for none, and a tool's scope
	// is asked for only when a call of it meets 403 insufficient_scope
	// naming it (MCP 2025-11-25, basic/authorization, "Scope Selection
	// Strategy": scopes_supported is the minimal set for basic
	// functionality, the rest is stepped up to).
	return &tidemark.Auth{Verify: v.Verify, Metadata: bearer.ResourceMetadata(resource, c.issuer, nil), ToolScopes: c.toolScopes}, nil
}
