// metadata.go holds the metadata documents of both sides: the
// authorization server's (RFC 8414, OpenID Connect Discovery 1.0), read
// to find its keys, and this resource server's own (RFC 9728), served to
// clients.

package bearer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// ServerMetadata is what a resource server reads of its authorization
// server's metadata.
type ServerMetadata struct {
	// Issuer is the issuer identifier, equal to the one configured.
	Issuer string `json:"issuer"`
	// JWKSURI is the URL of the JSON Web Key Set the issuer signs
	// tokens with; empty when it publishes none.
	JWKSURI string `json:"jwks_uri"`
	// IntrospectionEndpoint is the URL of its token introspection
	// (RFC 7662), empty when it publishes none.
	IntrospectionEndpoint string `json:"introspection_endpoint"`
}

// maxMetadataBytes bounds a metadata document or key set read from an
// authorization server.
const maxMetadataBytes = 1 << 20

// ParseServerMetadata reads an authorization server's metadata document
// body, fetched for the issuer identifier issuer. It fails when body is
// not a JSON object, when its issuer differs from issuer (RFC 8414,
// section 3.3; OpenID Connect Discovery 1.0, section 4.3: a mismatch
// must not be used), or when jwks_uri or introspection_endpoint is
// present and not an absolute http or https URL.
func ParseServerMetadata(body []byte, issuer string) (*ServerMetadata, error) {
	var m ServerMetadata
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("bearer: authorization server metadata is not a JSON object: %w", err)
	}
	if m.Issuer != issuer {
		return nil, fmt.Errorf("%w: its metadata names the issuer %q, not %q: set the issuer URL to exactly that", ErrMisconfigured, clip(m.Issuer), issuer)
	}
	for _, f := range [...]struct{ name, v string }{{"jwks_uri", m.JWKSURI}, {"introspection_endpoint", m.IntrospectionEndpoint}} {
		if f.v != "" && !isHTTPURL(f.v) {
			return nil, fmt.Errorf("bearer: authorization server metadata: %s %q is not an absolute http(s) URL", f.name, clip(f.v))
		}
	}
	return &m, nil
}

// MetadataURLs returns the URLs at which the metadata of issuer may be
// found, in the order MCP 2025-11-25 (basic/authorization, "Authorization
// Server Metadata Discovery") asks a client to try them: for an issuer
// with a path, the RFC 8414 form with the path after the well-known
// segment, the OpenID Connect form likewise, then the OpenID Connect form
// appended to the path; for one without, the RFC 8414 form, then OpenID
// Connect's.
func MetadataURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil || !isHTTPURL(issuer) || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bearer: issuer %q: want an absolute http(s) URL without query or fragment (RFC 8414, section 2)", issuer)
	}
	origin := u.Scheme + "://" + u.Host
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	if path == "" {
		return []string{origin + "/.well-known/oauth-authorization-server", origin + "/.well-known/openid-configuration"}, nil
	}
	return []string{
		origin + "/.well-known/oauth-authorization-server" + path,
		origin + "/.well-known/openid-configuration" + path,
		origin + path + "/.well-known/openid-configuration",
	}, nil
}

// Discover fetches the metadata of issuer from the first of its
// MetadataURLs that answers 200 and parses it (ParseServerMetadata). A
// URL answering 4xx is skipped; any other failure ends the discovery.
// When every URL answers 4xx, or the metadata names another issuer, the
// error wraps ErrMisconfigured.
func Discover(ctx context.Context, client *http.Client, issuer string) (*ServerMetadata, error) {
	urls, err := MetadataURLs(issuer)
	if err != nil {
		return nil, err
	}
	for _, u := range urls {
		body, status, err := get(ctx, client, u)
		switch {
		case err != nil:
			return nil, fmt.Errorf("bearer: authorization server metadata: %w", err)
		case status == http.StatusOK:
			return ParseServerMetadata(body, issuer)
		case status >= 400 && status < 500:
			continue
		default:
			return nil, fmt.Errorf("bearer: authorization server metadata %s answered HTTP %d", u, status)
		}
	}
	return nil, fmt.Errorf("%w: no authorization server metadata for %s at %s", ErrMisconfigured, issuer, strings.Join(urls, ", "))
}

// get fetches u and returns its body, bounded by maxMetadataBytes, and
// status.
func get(ctx context.Context, client *http.Client, u string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if len(body) > maxMetadataBytes {
		return nil, 0, fmt.Errorf("%s: body over %d bytes", u, maxMetadataBytes)
	}
	return body, resp.StatusCode, nil
}

// WellKnownPath is the path of the protected resource metadata of a
// resource with no path (RFC 9728, section 3).
const WellKnownPath = "/.well-known/oauth-protected-resource"

// ResourceMetadataURL returns the URL of the protected resource metadata
// of resource, an absolute http(s) URL: the well-known path inserted
// between its host and its path (RFC 9728, section 3.1).
func ResourceMetadataURL(resource string) (string, error) {
	u, err := url.Parse(resource)
	if err != nil || !isHTTPURL(resource) || u.Fragment != "" {
		return "", fmt.Errorf("bearer: resource %q: want an absolute http(s) URL without fragment (RFC 9728, section 1.2)", resource)
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	return u.Scheme + "://" + u.Host + WellKnownPath + path, nil
}

// ResourceMetadata returns the protected resource metadata document of
// resource (RFC 9728, section 2) whose tokens issuer issues, for
// auth.ProtectedResourceMetadataHandler: the tokens come in the
// Authorization header only, and scopes (scopes_supported, omitted when
// empty) lists the scopes every request needs, the minimal set a client
// asks for at its first authorization. A scope only some calls need
// stays out of it: the 403 insufficient_scope of such a call names it,
// and the client steps up to it then (MCP 2025-11-25, basic/authorization,
// "Scope Selection Strategy" and "Scope Challenge Handling").
func ResourceMetadata(resource, issuer string, scopes []string) *oauthex.ProtectedResourceMetadata {
	return &oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   []string{issuer},
		ScopesSupported:        scopes,
		BearerMethodsSupported: []string{"header"},
	}
}

// isHTTPURL reports whether s is an absolute http or https URL with a
// host.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// clip bounds a value read from a server for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// ErrUnavailable marks a failure to reach the authorization server: the
// token was not judged, and the request may be retried (a resource
// server answers 503).
var ErrUnavailable = errors.New("bearer: the authorization server cannot be reached")

// ErrMisconfigured marks a discovery that reached the issuer's host and
// found no metadata for it there, or metadata naming another issuer: the
// issuer URL is wrong (a missing or extra trailing slash, a wrong path),
// and asking again will not help.
var ErrMisconfigured = errors.New("bearer: the issuer URL does not name this authorization server")
