// Package redact holds the form in which secrets appear in logs and error
// messages, which must never hold them whole.
package redact

import (
	"net/url"
	"strings"
)

// Shown is how many leading bytes of a session token or a task ID logs,
// errors and the operator's inspector show: the rest stays secret.
const Shown = 8

// Token returns the form in which a session token appears in logs and
// errors: its first 8 bytes followed by "…" (a token of 8 bytes or fewer
// as it is). The token is a bearer secret: anyone who holds it can act in
// the session (MCP 2025-11-25, basic/transports, "Session Management"), so
// no log line or error carries it whole.
func Token(token string) string {
	if len(token) > Shown {
		return token[:Shown] + "…"
	}
	return token
}

// URL returns the form in which a URL that may carry a password (a Redis
// URL's redis://:PASSWORD@HOST, an upstream's https://USER:PASSWORD@HOST)
// appears in logs and errors: the password replaced by "xxxxx"
// (url.URL.Redacted), or, for a string with user information (an "@")
// that does not parse as a URL, a placeholder, since any part of it may be
// the secret. A URL without a password, and a string without an "@"
// (host:port), is returned as it is: a password is user information.
func URL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		if !strings.Contains(u, "@") {
			return u
		}
		return "(a URL that does not parse)"
	}
	if _, has := p.User.Password(); !has {
		return u
	}
	return p.Redacted()
}

// URLError returns the text of err, an error about the URL raw (from
// url.Parse or a parser built on it), in a form that holds no secret of
// raw: when raw does not parse and has user information (an "@"), the
// parser's text quotes raw or the fragment where it failed, which may be
// part of the password, so only what to do is said; otherwise raw, and
// its password, are replaced by URL's form wherever the text quotes them.
func URLError(raw string, err error) string {
	p, perr := url.Parse(raw)
	if perr != nil {
		if strings.Contains(raw, "@") {
			return "the URL does not parse; a password with characters such as / + = % @ or spaces must be percent-encoded (/ as %2F, + as %2B, = as %3D)"
		}
		return err.Error()
	}
	text := strings.ReplaceAll(err.Error(), raw, URL(raw))
	if pw, has := p.User.Password(); has && pw != "" {
		text = strings.ReplaceAll(text, pw, "xxxxx")
	}
	return text
}
