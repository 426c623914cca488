package main

// The flags of `tidemark serve --upstream` that give the gateway an access
// token of its own for the upstream, by the OAuth 2.0 client credentials
// grant (RFC 6749, section 4.4), so that a client's token never needs to
// pass through (MCP 2025-11-25, basic/authorization, "Token Passthrough";
// README, "Authorization").

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/tidemark-mcp/tidemark/internal/redact"
)

// upstreamOAuth holds the --upstream-oauth-* flags.
type upstreamOAuth struct {
	tokenURL   string
	clientID   string
	secretFile string   // --upstream-oauth-client-secret-file
	scopes     []string // --upstream-oauth-scope
	secret     string   // resolved by check
}

// upstreamSecretEnv is the variable that may hold the upstream client
// secret itself.
const upstreamSecretEnv = envPrefix + "UPSTREAM_OAUTH_CLIENT_SECRET"

func upstreamOAuthFlags(fs *flag.FlagSet, c *upstreamOAuth) {
	fs.StringVar(&c.tokenURL, "upstream-oauth-token-url", "", "with --upstream: the token endpoint of the upstream's authorization server, from which the gateway obtains a token of its own (client credentials grant, RFC 6749 section 4.4; resource: the --upstream URL, RFC 8707), sent as Authorization: Bearer on every --upstream request and renewed before it expires (URL; empty: none)")
	fs.StringVar(&c.clientID, "upstream-oauth-client-id", "", "with --upstream-oauth-token-url: the gateway's client ID there; its secret is in --upstream-oauth-client-secret-file (text)")
	fs.StringVar(&c.secretFile, "upstream-oauth-client-secret-file", "", "with --upstream-oauth-client-id: file whose first line is the client secret; $"+upstreamSecretEnv+" may hold the secret itself (path; empty: $"+upstreamSecretEnv+")")
	fs.Func("upstream-oauth-scope", "with --upstream-oauth-token-url: a scope the gateway's token is requested with (repeatable; none: the authorization server's default)", func(s string) error {
		if s == "" || strings.ContainsAny(s, " \"\\") {
			return fmt.Errorf("want a scope without spaces or quotes, not %q", s)
		}
		c.scopes = append(c.scopes, s)
		return nil
	})
}

// check refuses --upstream-oauth-* values that cannot work, given the
// headers the gateway adds and forwards, and resolves the client secret
// (never shown in an error).
func (c *upstreamOAuth) check(header http.Header, forward []string, lookup func(string) (string, bool)) error {
	if c.tokenURL == "" {
		return nil // its flags are refused without it by checkOnlyWith
	}
	if err := checkHTTPURL("upstream-oauth-token-url", c.tokenURL, "the token endpoint of the upstream's authorization server"); err != nil {
		return err
	}
	if c.clientID == "" {
		return errors.New("--upstream-oauth-token-url needs the gateway's client: want --upstream-oauth-client-id too")
	}
	if header.Get("Authorization") != "" {
		return errors.New("--upstream-header Authorization and --upstream-oauth-token-url both set the upstream's Authorization: want one of them")
	}
	for _, name := range forward {
		if http.CanonicalHeaderKey(name) == "Authorization" {
			return errors.New("--upstream-forward-header Authorization and --upstream-oauth-token-url both set the upstream's Authorization: want one of them")
		}
	}
	envSecret, inEnv := lookup(upstreamSecretEnv)
	switch {
	case c.secretFile != "" && inEnv:
		return fmt.Errorf("the upstream client secret is named by $%s and --upstream-oauth-client-secret-file: want one of them", upstreamSecretEnv)
	case c.secretFile == "" && !inEnv:
		return fmt.Errorf("--upstream-oauth-client-id needs its secret: want --upstream-oauth-client-secret-file, or $%s", upstreamSecretEnv)
	}
	c.secret = envSecret
	if c.secretFile != "" {
		if err := checkFile("upstream-oauth-client-secret-file", c.secretFile, "a file holding the upstream client secret"); err != nil {
			return err
		}
		text, err := os.ReadFile(c.secretFile)
		if err != nil {
			return fmt.Errorf("--upstream-oauth-client-secret-file %q: %v", c.secretFile, errors.Unwrap(err))
		}
		c.secret, _, _ = strings.Cut(string(text), "\n")
		c.secret = strings.TrimSuffix(c.secret, "\r")
	}
	return nil
}

// tokenSource returns the source of the gateway's own token for the
// upstream at upstream, nil without --upstream-oauth-token-url. It asks
// the token endpoint, bounded by timeout, when no token is held or the one
// held expires within 10 seconds (oauth2.ReuseTokenSource), and logs each
// token obtained and each refusal, never the secret or the token.
func (c *upstreamOAuth) tokenSource(upstream string, timeout time.Duration, logger *slog.Logger) oauth2.TokenSource {
	if c.tokenURL == "" {
		return nil
	}
	cfg := &clientcredentials.Config{
		ClientID: c.clientID, ClientSecret: c.secret, TokenURL: c.tokenURL, Scopes: c.scopes,
		// The token names the upstream as its audience (RFC 8707, section
		// 2; MCP 2025-11-25, basic/authorization, "Resource Parameter
		// Implementation").
		EndpointParams: url.Values{"resource": {upstream}},
	}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: timeout})
	return oauth2.ReuseTokenSource(nil, &loggedTokenSource{cfg: cfg, ctx: ctx, logger: logger})
}

// loggedTokenSource obtains a new token at each Token, and says so in the
// log.
type loggedTokenSource struct {
	cfg    *clientcredentials.Config
	ctx    context.Context
	logger *slog.Logger
}

func (s *loggedTokenSource) Token() (*oauth2.Token, error) {
	tok, err := s.cfg.Token(s.ctx)
	attrs := []any{"token_url", redact.URL(s.cfg.TokenURL), "client_id", s.cfg.ClientID}
	if err != nil {
		err = fmt.Errorf("no token for the upstream from %s for client %s: %s: check --upstream-oauth-client-id and its secret, and that the authorization server runs",
			redact.URL(s.cfg.TokenURL), s.cfg.ClientID, tokenError(err))
		s.logger.Warn("upstream token refused", append(attrs, "error", err)...)
		return nil, err
	}
	if !tok.Expiry.IsZero() {
		attrs = append(attrs, "expires_in", time.Until(tok.Expiry).Round(time.Second))
	}
	s.logger.Info("upstream token obtained", attrs...)
	return tok, nil
}

// tokenError describes a failure of the token endpoint by its HTTP status
// and OAuth error code (RFC 6749, section 5.2), without the body, which
// is the authorization server's to word.
func tokenError(err error) string {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.Response == nil {
		return err.Error()
	}
	s := re.Response.Status
	if re.ErrorCode != "" {
		s += " " + re.ErrorCode
	}
	return s
}
