// client.go holds the rules a client of the operator's listener (tidemark
// inspect) follows: how an operator may write the listener's address, and
// what an answer other than the inspector's JSON says of the listener that
// gave it.

package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// ErrAddress: an address that is neither host:port nor an http(s) URL.
var ErrAddress = errors.New("want host:port or an http:// URL, e.g. 127.0.0.1:9464 or http://127.0.0.1:9464")

// BaseURL returns the base URL of the operator's listener at addr, which
// an operator writes as tidemark serve --metrics-addr takes it (host:port;
// the host may be empty for every local interface) or as a URL: http or
// https, a host, and optionally a path prefix (a listener behind a
// reverse proxy), without query or fragment. The result has no trailing
// slash: an endpoint's path is appended to it. The error wraps
// ErrAddress.
func BaseURL(addr string) (string, error) {
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Port() == "" && strings.HasSuffix(u.Host, ":") {
			return "", ErrAddress
		}
		return u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"), nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || strings.ContainsAny(addr, "/?#@ ") {
		return "", ErrAddress
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// answer is what an answer of the operator's listener that is not the
// inspector's 200 says.
type answer struct {
	// MCP reports that the body is a JSON-RPC message: the address is an
	// MCP listener (tidemark serve --addr, or another MCP server), not an
	// operator's listener, which never answers JSON-RPC.
	MCP bool
	// Detail is, for the inspector's own error (a JSON object with
	// "error"), that error; for a JSON-RPC error, its data.reason (when
	// it has one) and message, as "REASON: MESSAGE"; otherwise the start
	// of the body (at most maxBody bytes, "…" when cut), "" for an empty
	// one.
	Detail string
	// Inspector reports that the body is the inspector's own error.
	Inspector bool
}

// maxBody bounds the start of a foreign body that answer.Detail keeps
// (bytes).
const maxBody = 120

// readAnswer returns what the body of an answer other than 200 says. A
// JSON-RPC body is told by its "jsonrpc": "2.0" member (JSON-RPC 2.0,
// section 5), whatever its id: a refusal's id is null, which the go-sdk's
// decoder does not take.
func readAnswer(body []byte) answer {
	var env struct {
		JSONRPC string         `json:"jsonrpc"`
		Error   *jsonrpc.Error `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.JSONRPC == "2.0" {
		a := answer{MCP: true}
		if env.Error != nil {
			var data struct {
				Reason string `json:"reason"`
			}
			json.Unmarshal(env.Error.Data, &data)
			a.Detail = env.Error.Message
			if data.Reason != "" {
				a.Detail = data.Reason + ": " + env.Error.Message
			}
		}
		return a
	}
	var e struct {
		Error *string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		return answer{Inspector: true, Detail: *e.Error}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > maxBody {
		cut := maxBody
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return answer{Detail: s}
}

// Explain returns the sentence that says what an answer of status with
// body means, for an address given by flag: the inspector's own error as
// it is; for an MCP listener's, that it is one and where to point flag
// instead; for any other, that the address is not an operator's listener.
func Explain(status int, body []byte, flag string) string {
	a := readAnswer(body)
	switch {
	case a.Inspector:
		return fmt.Sprintf("answered %d: %s", status, a.Detail)
	case a.MCP:
		what := "a JSON-RPC message"
		if a.Detail != "" {
			what = "a JSON-RPC error (" + a.Detail + ")"
		}
		return fmt.Sprintf("answered %d with %s: that is an MCP listener (tidemark serve --addr), not the operator's listener: "+
			"point %s at the address tidemark serve --metrics-addr listens on (its log line \"operator's listener started\" names it)", status, what, flag)
	}
	detail := "an empty body"
	if a.Detail != "" {
		detail = fmt.Sprintf("the body %q", a.Detail)
	}
	return fmt.Sprintf("answered %d %s with %s, not the JSON of tidemark serve's operator's listener: point %s at the address tidemark serve --metrics-addr listens on (its log line \"operator's listener started\" names it)",
		status, http.StatusText(status), detail, flag)
}
