// authorize.go holds the resource server's check (Options.Auth): the
// bearer token every request must carry, and the scope a tools/call of a
// tool needs (MCP 2025-11-25, basic/authorization).

package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/bearer"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Auth makes a Handler an OAuth 2.1 resource server: every request of
// both eras must carry a bearer token that Verify accepts, before
// anything else is done with it but the Via, Host and Origin checks. The
// token's go-sdk auth.TokenInfo then rides in the request's context
// (auth.TokenInfoFromContext), so its UserID owns the sessions, tasks and
// requestStates the request creates.
type Auth struct {
	// Verify checks a token (bearer.Verifier.Verify, or any go-sdk
	// auth.TokenVerifier). An error wrapping auth.ErrInvalidToken refuses
	// the request with 401 token_invalid, its message after the reason
	// (it must never hold the token); any other error with 503
	// unavailable. Required.
	Verify auth.TokenVerifier
	// ResourceMetadata is the URL of this resource's protected resource
	// metadata (RFC 9728, section 3.1; bearer.ResourceMetadataURL), named
	// by every challenge as resource_metadata.
	ResourceMetadata string
	// Scopes are the scopes every request needs; a token without one of
	// them gets 403 insufficient_scope naming them all, and the 401
	// challenges name them as the scope to ask for.
	Scopes []string
	// ToolScopes maps a tool's name to the scope a tools/call of it needs,
	// beyond Scopes: a call whose token lacks it gets 403
	// insufficient_scope naming that scope, and nothing of its POST is
	// delivered.
	ToolScopes map[string]string
}

// authorize checks r's bearer token against a (401 token_missing, 401
// token_invalid, 503 unavailable, 403 insufficient_scope) and returns r
// with the token's auth.TokenInfo in its context.
func (h *Handler) authorize(r *http.Request, a *Auth) (*http.Request, *refusal) {
	scope := strings.Join(a.Scopes, " ")
	token, err := bearer.ParseAuthorization(r.Header.Values("Authorization"))
	switch {
	case errors.Is(err, bearer.ErrNoToken):
		ref := refuse(replay.ReasonTokenMissing, "this server needs a bearer token: obtain one from the authorization server its protected resource metadata names, and send it as Authorization: Bearer TOKEN")
		ref.challenge = bearer.Challenge("", scope, a.ResourceMetadata)
		return nil, ref
	case err != nil:
		msg := "the Authorization header is not one bearer token (RFC 6750, section 2.1): send exactly one, Authorization: Bearer TOKEN"
		if errors.Is(err, bearer.ErrTooLong) {
			msg = fmt.Sprintf("the bearer token is longer than %d bytes, more than any authorization server issues: check what the Authorization header carries", bearer.MaxTokenBytes)
		}
		ref := refuse(replay.ReasonTokenInvalid, msg)
		ref.challenge = bearer.Challenge(bearer.ErrorInvalidToken, scope, a.ResourceMetadata)
		return nil, ref
	}
	ti, err := a.Verify(r.Context(), token, r)
	switch {
	case errors.Is(err, auth.ErrInvalidToken):
		why := strings.TrimPrefix(strings.TrimPrefix(err.Error(), auth.ErrInvalidToken.Error()), ": ")
		ref := refuse(replay.ReasonTokenInvalid, "the bearer token is not valid here ("+why+"): obtain a new token for this server")
		ref.challenge = bearer.Challenge(bearer.ErrorInvalidToken, scope, a.ResourceMetadata)
		return nil, ref
	case err != nil || ti == nil:
		ref := refuse(replay.ReasonUnavailable, "the authorization server cannot be asked about the bearer token now: retry later")
		ref.cause = err
		return nil, ref
	}
	for _, s := range a.Scopes {
		if !slices.Contains(ti.Scopes, s) {
			return nil, scopeRefusal(scope, a.ResourceMetadata, "every request")
		}
	}
	return withTokenInfo(r, ti), nil
}

// scopeRefusal returns the 403 insufficient_scope of a token that lacks
// scope, which what needs.
func scopeRefusal(scope, resourceMetadata, what string) *refusal {
	ref := refuse(replay.ReasonInsufficientScope, "the bearer token lacks the scope "+quote(scope)+", which "+what+" needs: authorize again asking for it")
	ref.challenge = bearer.Challenge(bearer.ErrorInsufficientScope, scope, resourceMetadata)
	return ref
}

// toolScopes refuses the first tools/call among calls whose tool needs a
// scope (Auth.ToolScopes) that the request's token lacks, with that
// call's id.
func (h *Handler) toolScopes(r *http.Request, calls []*jsonrpc.Request) *refusal {
	a := h.opts.Auth
	if a == nil || len(a.ToolScopes) == 0 {
		return nil
	}
	ti := auth.TokenInfoFromContext(r.Context())
	for _, c := range calls {
		if c.Method != "tools/call" {
			continue
		}
		var p struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(c.Params, &p) != nil {
			continue // the server refuses its params
		}
		scope, ok := a.ToolScopes[p.Name]
		if !ok || ti != nil && slices.Contains(ti.Scopes, scope) {
			continue
		}
		ref := scopeRefusal(scope, a.ResourceMetadata, "a call of the tool "+quote(p.Name))
		ref.id = c.ID
		return ref
	}
	return nil
}

// withTokenInfo returns r with ti in its context where
// auth.TokenInfoFromContext finds it. The go-sdk keeps it under a key of
// its own that only its auth.RequireBearerToken middleware sets, so the
// token, verified already, passes through that middleware once more: its
// verifier returns ti, and its own expiry check is relaxed (the verifier
// applied the configured skew).
func withTokenInfo(r *http.Request, ti *auth.TokenInfo) *http.Request {
	out := r
	pass := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return ti, nil }
	auth.RequireBearerToken(pass, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true, ClockSkew: 24 * time.Hour})(
		http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { out = r }),
	).ServeHTTP(discard{}, r)
	return out
}

// discard is a ResponseWriter that writes nowhere.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
