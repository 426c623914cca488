// Package redact holds the form in which secrets appear in logs and error
// messages, which must never hold them whole.
package redact

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
