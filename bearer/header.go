// header.go holds the two texts of the bearer scheme a resource server
// reads and writes: the Authorization request header and the
// WWW-Authenticate challenge (RFC 6750, sections 2.1 and 3).

package bearer

import (
	"errors"
	"fmt"
	"strings"
)

// MaxTokenBytes bounds the access token an Authorization header may
// carry, in bytes: a larger one is refused before any verification.
const MaxTokenBytes = 16 << 10

// Errors of ParseAuthorization.
var (
	// ErrNoToken: the request carries no Authorization header, or one of
	// another scheme than Bearer: it presents no bearer token at all
	// (RFC 6750, section 3.1: the challenge then names no error).
	ErrNoToken = errors.New("bearer: no bearer token")
	// ErrMalformed: the request has more than one Authorization header, or
	// a Bearer credential that is not one b64token (RFC 6750, section
	// 2.1) of at most MaxTokenBytes.
	ErrMalformed = errors.New("bearer: malformed Authorization header")
	// ErrTooLong: the bearer token is longer than MaxTokenBytes; it wraps
	// ErrMalformed.
	ErrTooLong = fmt.Errorf("%w: the token is longer than %d bytes", ErrMalformed, MaxTokenBytes)
)

// ParseAuthorization returns the access token of a request whose
// Authorization header values are values (http.Header.Values). The scheme
// is matched without regard to case and may be followed by one or more
// spaces (RFC 9110, section 11.4); the token is a b64token: letters,
// digits and - . _ ~ + /, then any number of =. Errors: ErrNoToken,
// ErrMalformed (ErrTooLong when the token is over MaxTokenBytes).
func ParseAuthorization(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrNoToken
	case 1:
	default:
		return "", ErrMalformed
	}
	scheme, rest, _ := strings.Cut(values[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", ErrNoToken
	}
	token := strings.TrimLeft(rest, " ")
	if len(token) > MaxTokenBytes {
		return "", ErrTooLong
	}
	if token == "" || !isB64Token(token) {
		return "", ErrMalformed
	}
	return token, nil
}

// isB64Token reports whether s is a b64token (RFC 6750, section 2.1).
func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		switch c {
		case '-', '.', '_', '~', '+', '/':
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// The error codes of a Bearer challenge (RFC 6750, section 3.1).
const (
	ErrorInvalidToken      = "invalid_token"
	ErrorInsufficientScope = "insufficient_scope"
)

// Challenge returns the value of a WWW-Authenticate header for a refused
// request (RFC 6750, section 3; MCP 2025-11-25, basic/authorization):
// `Bearer` followed by, for each that is not empty, error="code",
// scope="scope" and resource_metadata="url" (RFC 9728, section 5.1),
// each a quoted-string (RFC 9110, section 5.6.4).
func Challenge(code, scope, resourceMetadata string) string {
	var b strings.Builder
	b.WriteString("Bearer")
	sep := " "
	for _, p := range [...]struct{ name, value string }{
		{"error", code}, {"scope", scope}, {"resource_metadata", resourceMetadata},
	} {
		if p.value == "" {
			continue
		}
		b.WriteString(sep)
		b.WriteString(p.name)
		b.WriteString(`="`)
		for i := 0; i < len(p.value); i++ {
			if c := p.value[i]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(p.value[i])
		}
		b.WriteByte('"')
		sep = ", "
	}
	return b.String()
}
