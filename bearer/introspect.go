// introspect.go holds token introspection (RFC 7662): the authorization
// server says whether a token it issued is active, and what it grants.

package bearer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// Introspection is the answer of an introspection endpoint (RFC 7662,
// section 2.2).
type Introspection struct {
	Active *bool  `json:"active"`
	Issuer string `json:"iss"`
	claims
}

// introspect asks the introspection endpoint about token (RFC 7662,
// section 2.1: a form POST, with HTTP Basic client authentication when a
// client ID is configured). An answer whose active is false is an invalid
// token, whatever its status (some servers answer 401 with it); an active
// one must name this audience, be unexpired and, when it names an
// issuer, name the configured one. Who the token acts for is its sub,
// else its client_id (a client credentials grant has no user).
func (v *Verifier) introspect(ctx context.Context, token string) (*auth.TokenInfo, error) {
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.cfg.IntrospectionURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: introspection: %v", ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if v.cfg.ClientID != "" {
		// RFC 6749, section 2.3.1: both are form-encoded before Basic.
		req.SetBasicAuth(url.QueryEscape(v.cfg.ClientID), url.QueryEscape(v.cfg.ClientSecret))
	}
	resp, err := v.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: introspection: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes))
	if err != nil {
		return nil, fmt.Errorf("%w: introspection: %v", ErrUnavailable, err)
	}
	ans, err := ParseIntrospection(body)
	switch {
	case err == nil && !*ans.Active:
		return nil, invalid("the authorization server says the token is not active")
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: introspection answered HTTP %d", ErrUnavailable, resp.StatusCode)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := v.checkIssuer(ans.Issuer, false); err != nil {
		return nil, err
	}
	user := ans.Subject
	if user == "" {
		user = ans.ClientID
	}
	if user == "" {
		return nil, invalid("the introspection names neither sub nor client_id: the token acts for no one")
	}
	return v.tokenInfo(&ans.claims, user)
}

// ParseIntrospection reads the body of an introspection answer (RFC 7662,
// section 2.2): a JSON object with a boolean active, and with sub,
// client_id, iss, scope, aud (a string or an array of strings), exp and
// nbf (NumericDates) when present. It fails when the body is not such
// an object.
func ParseIntrospection(body []byte) (*Introspection, error) {
	var ans Introspection
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("bearer: introspection answer: %v", err)
	}
	if ans.Active == nil {
		return nil, fmt.Errorf("bearer: introspection answer has no boolean active")
	}
	for _, n := range []*json.Number{ans.Expiry, ans.NotBefore} {
		if n != nil {
			if _, err := numericDate(*n); err != nil {
				return nil, fmt.Errorf("bearer: introspection answer: exp or nbf is %v", err)
			}
		}
	}
	return &ans, nil
}
