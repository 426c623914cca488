// Package oauthclient is the OAuth 2.1 client of `tidemark connect`: an
// http.RoundTripper that adds the access token to every request to one MCP
// server and, when the server answers 401 (or 403 insufficient_scope),
// authorizes as the MCP authorization specification asks of a client (MCP
// 2025-11-25, "basic/authorization"), then sends the request again:
//
//   - protected resource metadata (RFC 9728) from the challenge's
//     resource_metadata (WWW-Authenticate), else the well-known URL at the
//     endpoint's path, then at the root;
//   - authorization server metadata (RFC 8414, then OpenID Connect
//     Discovery, in the specification's order);
//   - a client: a pre-registered one (Config.ClientID), else a client ID
//     metadata document URL (Config.ClientMetadataURL) when the server
//     lists client_id_metadata_document_supported, else dynamic client
//     registration (RFC 7591);
//   - the authorization code grant with PKCE S256 (a server whose metadata
//     does not list S256 is refused), the resource parameter (RFC 8707) on
//     the authorization and every token request, the scope of the
//     challenge else the resource metadata's scopes_supported, and on 403
//     insufficient_scope a new authorization for the union of the scopes
//     granted and challenged, by the client the first one registered;
//   - a new dynamic registration when the authorization server refuses
//     the registered client (invalid_client: it forgot the registration),
//     once per refusal;
//   - refresh tokens, and tokens kept per server in a file of mode 0600
//     (store.go), so that a later run needs no new authorization.
//
// The flow itself is the go-sdk's auth.AuthorizationCodeHandler on
// golang.org/x/oauth2; this package supplies the browser step
// (browser.go), the token store and the checks the handler leaves to its
// caller.
package oauthclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// Browser says how the user reaches the authorization URL.
type Browser string

// The Browser values.
const (
	// BrowserOpen opens the system browser on the URL (xdg-open, open,
	// rundll32) and also prints it on stderr.
	BrowserOpen Browser = "open"
	// BrowserPrint prints the URL on stderr for the user to open.
	BrowserPrint Browser = "print"
	// BrowserFetch fetches the URL itself and follows the redirects until
	// the loopback callback receives the code: for authorization servers
	// that authorize without a user's interaction (tests, headless
	// servers).
	BrowserFetch Browser = "fetch"
)

// ParseBrowser returns the Browser named s.
func ParseBrowser(s string) (Browser, error) {
	switch b := Browser(s); b {
	case BrowserOpen, BrowserPrint, BrowserFetch:
		return b, nil
	}
	return "", fmt.Errorf("want open, print or fetch, got %q", s)
}

// AuthorizeTimeout bounds one authorization: from the authorization URL
// to the code at the callback, in which the user logs in and consents.
const AuthorizeTimeout = 5 * time.Minute

// challengeBodyLimit bounds the body of a 401 or 403 kept to be returned
// when the authorization fails, in bytes.
const challengeBodyLimit = 64 << 10

// Config configures New.
type Config struct {
	// Server is the MCP endpoint, e.g. "https://mcp.example.com/mcp".
	Server string
	// ClientID and ClientSecret are a client registered beforehand with
	// the authorization server; the secret is empty for a public client.
	// Empty ClientID: a client ID metadata document or dynamic
	// registration.
	ClientID, ClientSecret string
	// ClientMetadataURL is the https URL of this client's metadata
	// document, used as its client_id where the authorization server
	// supports it (MCP 2025-11-25, "Client ID Metadata Documents").
	ClientMetadataURL string
	// Browser: how the user reaches the authorization URL. Empty:
	// BrowserOpen.
	Browser Browser
	// CallbackPort is the loopback port of the redirect URI
	// http://127.0.0.1:PORT/callback. Zero: a free port, chosen at the
	// first authorization.
	CallbackPort int
	// TokenDir is where tokens are kept. Empty: DefaultTokenDir().
	TokenDir string
	// Base sends the requests. Nil: http.DefaultTransport.
	Base http.RoundTripper
	// Prompt receives the authorization URL in BrowserOpen and
	// BrowserPrint. Nil: os.Stderr.
	Prompt io.Writer
	// Logger receives a line per authorization, refresh and failure. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// Transport is the http.RoundTripper of New. Close it when done.
type Transport struct {
	cfg    Config
	base   http.RoundTripper
	store  store
	logger *slog.Logger
	// authHTTP sends the requests of the authorization itself (metadata,
	// registration, token): see observer.
	authHTTP *http.Client
	obs      *observer

	// authMu makes one authorization run at a time; the requests refused
	// meanwhile wait for it and use its token.
	authMu  sync.Mutex
	handler *auth.AuthorizationCodeHandler // built at the first authorization
	cb      *callback
	// registered is the client dynamic registration gave at the first
	// authorization, used by every later one until the authorization
	// server refuses it (forgetRegisteredLocked); granted the scopes the
	// last authorization asked for, kept in each later request (a
	// step-up asks for their union with the challenge's). Both under
	// authMu.
	registered *oauthex.ClientCredentials
	lastClient *oauthex.ClientCredentials // the client of the last token
	granted    []string

	mu sync.Mutex
	ts oauth2.TokenSource // nil: no token yet
	// refreshRefused is the client_id the token endpoint refused with
	// invalid_client at a refresh, for the next authorization to drop.
	refreshRefused string
}

// New returns the transport for cfg.Server, with the token stored for it
// by an earlier run, if any.
func New(cfg Config) (*Transport, error) {
	if cfg.Server == "" {
		return nil, errors.New("oauthclient: Config.Server is empty")
	}
	if cfg.Browser == "" {
		cfg.Browser = BrowserOpen
	}
	if _, err := ParseBrowser(string(cfg.Browser)); err != nil {
		return nil, err
	}
	if cfg.ClientMetadataURL != "" {
		if u, err := url.Parse(cfg.ClientMetadataURL); err != nil || u.Scheme != "https" || strings.Trim(u.Path, "/") == "" {
			return nil, fmt.Errorf("client metadata URL %q: want an https URL with a path (MCP 2025-11-25, Client ID Metadata Documents)", cfg.ClientMetadataURL)
		}
	}
	if cfg.Base == nil {
		cfg.Base = http.DefaultTransport
	}
	if cfg.Prompt == nil {
		cfg.Prompt = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TokenDir == "" {
		dir, err := DefaultTokenDir()
		if err != nil {
			// The bridge still works; tokens last as long as the process.
			cfg.Logger.Warn("oauth: tokens will not be kept", "error", err)
		}
		cfg.TokenDir = dir
	}
	obs := &observer{base: cfg.Base, s256: make(map[string]bool)}
	t := &Transport{
		cfg:      cfg,
		base:     cfg.Base,
		store:    store{dir: cfg.TokenDir},
		logger:   cfg.Logger,
		obs:      obs,
		authHTTP: &http.Client{Transport: obs},
	}
	rec, err := t.store.load(cfg.Server)
	if err != nil {
		t.logger.Warn("oauth: stored token not used", "file", t.store.path(cfg.Server), "error", err)
	}
	if rec != nil {
		obs.setResource(rec.Resource)
		conf := &oauth2.Config{ClientID: rec.ClientID, ClientSecret: rec.ClientSecret, Endpoint: oauth2.Endpoint{TokenURL: rec.TokenURL, AuthStyle: rec.AuthStyle}, Scopes: rec.Scopes}
		t.ts = t.saving(rec, conf.TokenSource(t.refreshContext(), rec.Token))
		t.logger.Debug("oauth: stored token loaded", "file", t.store.path(cfg.Server), "expiry", rec.Token.Expiry)
	}
	return t, nil
}

// TokenFile returns the path of the file that keeps the server's token.
func (t *Transport) TokenFile() string { return t.store.path(t.cfg.Server) }

// Close stops the loopback callback listener, if one was started.
func (t *Transport) Close() error {
	t.authMu.Lock()
	defer t.authMu.Unlock()
	if t.cb != nil {
		return t.cb.close()
	}
	return nil
}

// RoundTrip implements http.RoundTripper: the request with the access
// token; on 401, or 403 with error="insufficient_scope" (RFC 6750,
// section 3.1), one authorization and the request once more. When the
// authorization fails, the server's refusal is returned as it came and
// the reason is logged; a request whose body cannot be sent again is not
// retried.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ts, tok := t.token()
	resp, err := t.base.RoundTrip(withToken(req, tok, req.Body))
	if err != nil || !t.challenged(resp) {
		return resp, err
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, challengeBodyLimit))
	resp.Body.Close()
	refused := func() *http.Response {
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp
	}
	if err := t.authorize(req, resp, body, ts); err != nil {
		t.logger.Error("oauth: authorization failed; the request goes back refused", "server", t.cfg.Server, "status", resp.StatusCode, "error", err)
		body = unauthorizedBody(body, err)
		resp.Header.Set("Content-Type", "application/json")
		resp.Header.Del("Content-Length")
		resp.ContentLength = int64(len(body))
		return refused(), nil
	}
	_, tok = t.token()
	var again io.ReadCloser
	if req.GetBody != nil {
		if again, err = req.GetBody(); err != nil {
			return refused(), nil
		}
	}
	return t.base.RoundTrip(withToken(req, tok, again))
}

// challenged reports whether resp asks for an authorization: 401, or 403
// whose Bearer challenge says insufficient_scope (MCP 2025-11-25,
// "Scope Challenge Handling"; another 403 is a refusal no token changes).
func (t *Transport) challenged(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return true
	case http.StatusForbidden:
		cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
		if err != nil {
			return false
		}
		return slices.ContainsFunc(cs, func(c oauthex.Challenge) bool {
			return c.Scheme == "bearer" && c.Params["error"] == "insufficient_scope"
		})
	}
	return false
}

// withToken returns a copy of req with body and, when tok is set, the
// Authorization header of a bearer token (RFC 6750, section 2.1).
func withToken(req *http.Request, tok *oauth2.Token, body io.ReadCloser) *http.Request {
	r := req.Clone(req.Context())
	r.Body = body
	if tok != nil {
		tok.SetAuthHeader(r)
	}
	return r
}

// token returns the current token source and a valid token of it: nil
// when there is none, or when it cannot be refreshed (then the next
// request is refused and authorizes anew).
func (t *Transport) token() (oauth2.TokenSource, *oauth2.Token) {
	t.mu.Lock()
	ts := t.ts
	t.mu.Unlock()
	if ts == nil {
		return nil, nil
	}
	tok, err := ts.Token()
	if err != nil {
		t.logger.Warn("oauth: token could not be refreshed; the next refusal authorizes again", "server", t.cfg.Server, "error", err)
		t.mu.Lock()
		if t.ts == ts {
			t.ts = nil
		}
		t.mu.Unlock()
		return nil, nil
	}
	return ts, tok
}

// authorize runs one authorization for the refusal resp of req, whose
// body was read into body, unless another request's authorization
// replaced the token source ts that req was sent with. When the
// authorization server refuses the dynamically registered client
// (invalid_client, RFC 6749 sections 4.1.2.1 and 5.2: it no longer knows
// the registration, e.g. it restarted without keeping it), the
// registration is dropped and the authorization runs once more with a new
// one (RFC 7591): once per refusal, so an authorization server that
// refuses every client gets two attempts.
func (t *Transport) authorize(req *http.Request, resp *http.Response, body []byte, ts oauth2.TokenSource) error {
	// The sender's bound on the answer's headers is for the server, not
	// for the person at the browser: it starts over once this returns.
	defer wire.HoldHeaderBound(req.Context())()
	t.authMu.Lock()
	defer t.authMu.Unlock()
	t.mu.Lock()
	replaced := t.ts != nil && t.ts != ts
	refreshRefused := t.refreshRefused
	t.refreshRefused = ""
	t.mu.Unlock()
	if replaced {
		return nil
	}
	t.logger.Info("oauth: the server asks for authorization", "server", t.cfg.Server, "status", resp.StatusCode, "browser", string(t.cfg.Browser))
	ctx, cancel := context.WithTimeout(req.Context(), AuthorizeTimeout)
	defer cancel()
	if refreshRefused != "" {
		// The token endpoint refused the client at a refresh: sending the
		// user to authorize it would only show them the same refusal.
		if t.registered != nil && t.registered.ClientID == refreshRefused {
			t.forgetRegisteredLocked(errors.New("the token endpoint answered invalid_client to a refresh"))
			return t.authorizeOnce(ctx, req, resp, body)
		}
		if err := t.store.removeClient(t.cfg.Server, refreshRefused); err != nil {
			t.logger.Warn("oauth: token file of the refused client not removed", "file", t.TokenFile(), "error", err)
		}
	}
	err := t.authorizeOnce(ctx, req, resp, body)
	if err != nil && clientRefused(err) && t.forgetRegisteredLocked(err) {
		err = t.authorizeOnce(ctx, req, resp, body)
	}
	return err
}

// authorizeOnce runs the authorization code flow once, with the handler
// of the client in use (handlerLocked), and makes its token the current
// one. Called with authMu.
func (t *Transport) authorizeOnce(ctx context.Context, req *http.Request, resp *http.Response, body []byte) error {
	h, err := t.handlerLocked()
	if err != nil {
		return err
	}
	copied := *resp
	copied.Body = io.NopCloser(bytes.NewReader(body))
	if err := h.Authorize(ctx, req, &copied); err != nil {
		return err
	}
	ts, err := h.TokenSource(ctx)
	if err != nil || ts == nil {
		return fmt.Errorf("no token after the authorization: %v", err)
	}
	if t.registered == nil && t.cfg.ClientID == "" && t.cfg.ClientMetadataURL == "" && t.lastClient != nil {
		// A step-up stays with the client registered now: a new client is
		// another party to the authorization server, and a server that
		// knows a client credentials' user by its client_id would own the
		// session by another user, and refuse it to the new token.
		t.registered = t.lastClient
		t.handler = nil
	}
	t.mu.Lock()
	t.ts = ts
	t.mu.Unlock()
	t.logger.Info("oauth: authorized", "server", t.cfg.Server, "file", t.TokenFile())
	return nil
}

// forgetRegisteredLocked drops the dynamically registered client that
// the authorization server refused with why, so that the next
// authorization registers anew: in memory, and in the token file when
// the file's token is that client's. It reports false when there is no
// such client: the user's --oauth-client-id, a client ID metadata
// document, or a registration this very authorization made, which a new
// one would not mend. Called with authMu.
func (t *Transport) forgetRegisteredLocked(why error) bool {
	if t.registered == nil {
		return false
	}
	id := t.registered.ClientID
	t.registered, t.lastClient, t.handler = nil, nil, nil
	t.logger.Warn("oauth: the authorization server refuses the registered client; registering again", "server", t.cfg.Server, "client_id", id, "error", why)
	if err := t.store.removeClient(t.cfg.Server, id); err != nil {
		t.logger.Warn("oauth: token file of the refused client not removed", "file", t.TokenFile(), "error", err)
	}
	return true
}

// clientRefused reports whether err says the authorization server
// refused the client itself: invalid_client from the token endpoint (RFC
// 6749, section 5.2), or from the authorization endpoint
// (errClientRefused).
func clientRefused(err error) bool {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode == "invalid_client" {
		return true
	}
	return errors.Is(err, errClientRefused)
}

// errClientRefused marks the authorization endpoint's refusal of the
// client_id: an error answer whose JSON body says invalid_client instead
// of a redirect to the callback (RFC 6749, section 4.1.2.1: a server
// that does not know the client must not redirect), or a redirect whose
// error is invalid_client.
var errClientRefused = errors.New("the authorization server refuses the client (invalid_client)")

// unauthorizedBody returns the body that replaces the server's refusal
// when the authorization failed with err: a JSON-RPC error that keeps the
// server's error.data.reason and tells the user what they can do, since
// the server's own message asks for a token, which only tidemark connect
// can obtain.
func unauthorizedBody(server []byte, err error) []byte {
	r := wire.ParseRefusal(http.StatusUnauthorized, server)
	msg := "tidemark connect could not obtain a token from the MCP server's authorization server, so the call was not run: " + err.Error() +
		". Send the call again to authorize again (with --oauth-browser open or print, complete the authorization in the browser within 5 minutes); if it keeps failing, check the authorization server, and the --oauth-client-id given to tidemark connect, if any"
	e := map[string]any{"code": -32000, "message": msg}
	if r.Reason != "" {
		e["data"] = map[string]string{"reason": r.Reason}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": e}) // strings and maps always encode
	return b
}

// handlerLocked returns the authorization code handler, building it with
// the callback listener at the first authorization. Called with authMu.
func (t *Transport) handlerLocked() (*auth.AuthorizationCodeHandler, error) {
	if t.handler != nil {
		return t.handler, nil
	}
	cb := t.cb
	if cb == nil {
		var err error
		if cb, err = listenCallback(t.cfg.CallbackPort); err != nil {
			return nil, err
		}
	}
	redirect := cb.redirectURL()
	hc := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL: redirect,
		AuthorizationCodeFetcher: func(ctx context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			return t.fetchCode(ctx, cb, a)
		},
		RequestRefreshToken: true,
		// The handler unions the scopes granted with a challenge's itself,
		// but a handler built anew (registered) has granted none yet.
		ScopeFilter: func(scopes []string) []string {
			for _, g := range t.granted {
				if g != "offline_access" && !slices.Contains(scopes, g) {
					scopes = append(scopes, g)
				}
			}
			return scopes
		},
		Client:         t.authHTTP,
		NewTokenSource: t.newTokenSource,
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName:              "tidemark connect",
			RedirectURIs:            []string{redirect},
			GrantTypes:              []string{"authorization_code", "refresh_token"},
			ResponseTypes:           []string{"code"},
			TokenEndpointAuthMethod: "none",
		}},
	}
	// The specification's order (MCP 2025-11-25, "Client Registration
	// Approaches"): a pre-registered client first, then a client ID
	// metadata document, then dynamic registration. The handler tries a
	// metadata document before a pre-registered client, so it gets the
	// one the user gave.
	switch {
	case t.cfg.ClientID != "":
		pre := &oauthex.ClientCredentials{ClientID: t.cfg.ClientID}
		if t.cfg.ClientSecret != "" {
			pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: t.cfg.ClientSecret}
		}
		hc.PreregisteredClient = pre
	case t.registered != nil:
		hc.PreregisteredClient = t.registered
	case t.cfg.ClientMetadataURL != "":
		hc.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: t.cfg.ClientMetadataURL}
	}
	h, err := auth.NewAuthorizationCodeHandler(hc)
	if err != nil {
		if t.cb == nil {
			cb.close()
		}
		return nil, err
	}
	t.cb, t.handler = cb, h
	t.logger.Debug("oauth: callback listening", "redirect_uri", redirect)
	return h, nil
}

// newTokenSource is the handler's NewTokenSource: it keeps the new token
// in the store and returns a source that keeps each refreshed one.
func (t *Transport) newTokenSource(ctx context.Context, conf *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
	// Called within Authorize, under authMu.
	t.granted = slices.Clone(conf.Scopes)
	t.lastClient = &oauthex.ClientCredentials{ClientID: conf.ClientID}
	if conf.ClientSecret != "" {
		t.lastClient.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: conf.ClientSecret}
	}
	rec := &Record{
		Server:       t.cfg.Server,
		Resource:     t.obs.resourceOf(),
		ClientID:     conf.ClientID,
		ClientSecret: conf.ClientSecret,
		TokenURL:     conf.Endpoint.TokenURL,
		AuthStyle:    conf.Endpoint.AuthStyle,
		Scopes:       conf.Scopes,
		Token:        tok,
	}
	if err := t.store.save(rec); err != nil {
		t.logger.Warn("oauth: token not stored; the next run authorizes again", "file", t.TokenFile(), "error", err)
	}
	return t.saving(rec, conf.TokenSource(ctx, tok)), nil
}

// refreshContext is the context of refreshes: it outlives every request
// and sends through authHTTP, which adds the resource parameter.
func (t *Transport) refreshContext() context.Context {
	return context.WithValue(context.Background(), oauth2.HTTPClient, t.authHTTP)
}

// saving returns a source of src's tokens that stores each new one in
// rec's file.
func (t *Transport) saving(rec *Record, src oauth2.TokenSource) oauth2.TokenSource {
	return &savingSource{t: t, rec: *rec, src: src, last: rec.Token.AccessToken}
}

// savingSource stores the tokens of src as they change.
type savingSource struct {
	t   *Transport
	src oauth2.TokenSource

	mu   sync.Mutex
	rec  Record
	last string // the access token stored last
}

func (s *savingSource) Token() (*oauth2.Token, error) {
	tok, err := s.src.Token()
	if err != nil {
		if clientRefused(err) {
			s.t.mu.Lock()
			s.t.refreshRefused = s.rec.ClientID
			s.t.mu.Unlock()
		}
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok.AccessToken != s.last {
		s.last = tok.AccessToken
		s.rec.Token = tok
		if err := s.t.store.save(&s.rec); err != nil {
			s.t.logger.Warn("oauth: refreshed token not stored", "file", s.t.TokenFile(), "error", err)
		} else {
			s.t.logger.Info("oauth: token refreshed", "server", s.t.cfg.Server, "expiry", tok.Expiry)
		}
	}
	return tok, nil
}

// observer sends the authorization's own requests. It notes which
// authorization endpoints list S256 in their metadata's
// code_challenge_methods_supported (RFC 8414), which fetchCode checks,
// and the resource parameter of the authorization code's exchange, which
// it adds to refresh requests that lack it (MCP 2025-11-25, "Resource
// Parameter Implementation": the resource goes with every token request;
// oauth2's refresh sends none).
type observer struct {
	base http.RoundTripper

	mu       sync.Mutex
	s256     map[string]bool // authorization endpoint → lists S256
	resource string
}

// metadataLimit bounds an authorization server metadata document read
// here, in bytes.
const metadataLimit = 1 << 20

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.Body != nil && req.GetBody != nil && isForm(req.Header) {
		req = o.withResource(req)
	}
	resp, err := o.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK || !strings.Contains(req.URL.Path, "/.well-known/") {
		return resp, err
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, metadataLimit))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil
	}
	if m, ok := serverMetadata(body); ok {
		o.mu.Lock()
		o.s256[m.AuthorizationEndpoint] = slices.Contains(m.CodeChallengeMethodsSupported, "S256")
		o.mu.Unlock()
	}
	return resp, nil
}

// isForm reports whether h says the body is a form
// (application/x-www-form-urlencoded), as token requests are.
func isForm(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "application/x-www-form-urlencoded")
}

// withResource notes the resource of an authorization code's exchange
// and adds the noted one to a refresh that lacks it (RFC 8707, section
// 2.2); any other request is returned as it is.
func (o *observer) withResource(req *http.Request) *http.Request {
	body, err := req.GetBody()
	if err != nil {
		return req
	}
	b, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		return req
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		return req
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch form.Get("grant_type") {
	case "authorization_code":
		if r := form.Get("resource"); r != "" {
			o.resource = r
		}
		return req
	case "refresh_token":
		if form.Has("resource") || o.resource == "" {
			return req
		}
		form.Set("resource", o.resource)
	default:
		return req
	}
	enc := form.Encode()
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(strings.NewReader(enc))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(enc)), nil }
	r.ContentLength = int64(len(enc))
	r.Header.Set("Content-Length", strconv.Itoa(len(enc)))
	return r
}

func (o *observer) setResource(r string) {
	o.mu.Lock()
	o.resource = r
	o.mu.Unlock()
}

func (o *observer) resourceOf() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.resource
}

// listsS256 reports whether the metadata of the authorization endpoint
// authURL listed S256, and whether any metadata was seen for it.
func (o *observer) listsS256(authURL string) (s256, seen bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s256, seen = o.s256[authURL]
	return s256, seen
}

// errNoS256 is the refusal of an authorization server without PKCE S256.
var errNoS256 = errors.New("the authorization server's metadata does not list S256 in code_challenge_methods_supported, so PKCE cannot protect the authorization code: tidemark connect does not authorize there (MCP 2025-11-25, Authorization Code Protection); ask the server's operator to enable PKCE S256")

// checkPKCE returns errNoS256 when the metadata of the authorization
// endpoint of authURL (an authorization request URL) was seen and does not
// list S256. Without metadata (the 2025-03-26 fallback to default
// endpoints) nothing can be checked and S256 is sent all the same.
func (o *observer) checkPKCE(authURL string) error {
	u, err := url.Parse(authURL)
	if err != nil {
		return err
	}
	u.RawQuery, u.Fragment = "", ""
	if s256, seen := o.listsS256(u.String()); seen && !s256 {
		return errNoS256
	}
	return nil
}

// serverMetadata decodes body as authorization server metadata (RFC
// 8414, section 2; OpenID Connect Discovery 1.0, section 3): ok when it
// names an authorization endpoint.
func serverMetadata(body []byte) (m oauthex.AuthServerMeta, ok bool) {
	if json.Unmarshal(body, &m) != nil || m.AuthorizationEndpoint == "" {
		return m, false
	}
	return m, true
}
