// Package redact holds the form in which secrets appear in logs and error
// messages, which must never hold them whole.
package redact

import "net/url"

// Token returns the form in which a session token appears in logs and
// errors: its first 8 bytes followed by "…" (a token of 8 bytes or fewer
// as it is). The token is a bearer secret: anyone who holds it can act in
// the session (MCP 2025-11-25, basic/transports, "Session Management"), so
// no log line or error carries it whole.
func Token(token string) string {
	if len(token) > 8 {
		return token[:8] + "…"
	}
	return token
}

// URL returns the form in which a URL that may carry a password (a Redis
// URL's redis://:PASSWORD@HOST, an upstream's https://USER:PASSWORD@HOST)
// appears in logs and errors: the password replaced by "xxxxx"
// (url.URL.Redacted), or, for a string that does not parse as a URL, a
// placeholder, since any part of it may be the secret. A URL without a
// password is returned as it is.
func URL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if _, has := p.User.Password(); !has {
		return u
	}
	return p.Redacted()
}
