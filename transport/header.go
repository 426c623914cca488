// header.go holds the reading of the request headers MCP Streamable HTTP
// defines (MCP 2025-11-25, basic/transports): MCP-Protocol-Version,
// Mcp-Session-Id, Last-Event-ID, Accept, and the media type and encoding of
// a POST body. readHeaders reads them all once, at the start of a request,
// into headers: each header's value, and the refusal each rule about them
// earns, which the request's kind applies in its own order.

package transport

import (
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/internal/wire"
	"github.com/tidemark-mcp/tidemark/replay"
)

// Protocol versions of the stateful era that the handler serves, and the
// version of the sessionless era.
const (
	V20241105    = "2024-11-05" // negotiated by the go-sdk when a client asks for it; served as 2025-03-26
	V20250326    = "2025-03-26"
	V20250618    = "2025-06-18"
	V20251125    = "2025-11-25"
	VSessionless = "2026-07-28"
)

// statefulVersions are the protocol versions of the stateful era the
// handler serves, newest first.
var statefulVersions = []string{V20251125, V20250618, V20250326, V20241105}

// servedVersions returns the protocol versions a handler with opts serves,
// newest first: 2026-07-28 when Options.Sessionless serves the sessionless
// era, then the stateful era's. A version is served only when it is in
// this list: a later one is not assumed to be the sessionless era's.
func servedVersions(opts *Options) []string {
	switch {
	case opts.SessionlessOnly:
		return []string{VSessionless}
	case opts.Sessionless == nil:
		return statefulVersions
	}
	return append([]string{VSessionless}, statefulVersions...)
}

// MaxSessionIDLen is the longest Mcp-Session-Id accepted, in bytes;
// Tidemark's own tokens are 26 bytes.
const MaxSessionIDLen = 128

// Media types of MCP Streamable HTTP.
const (
	mediaJSON = "application/json"
	mediaSSE  = "text/event-stream"
)

// protocolVersion returns the MCP-Protocol-Version header ("" when absent),
// or a refusal when it is repeated, or names a version that is not one of
// served (MCP 2025-11-25, basic/transports, "Protocol Version Header": 400
// for an invalid or unsupported version; unsupportedVersion). Both
// refusals list served in error.data.supported, for the client to send
// one of them, once.
func protocolVersion(r *http.Request, served []string) (string, *refusal) {
	vals := r.Header.Values(wire.HeaderProtocolVersion)
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		// Not -32022: no one version was asked for, so error.data has no
		// requested.
		ref := refuse(replay.ReasonProtocolVersion, "MCP-Protocol-Version header is repeated")
		ref.data = map[string]any{"supported": served}
		return "", ref
	}
	v := vals[0]
	if slices.Contains(served, v) {
		return v, nil
	}
	what := "unsupported MCP-Protocol-Version " + quote(v)
	if !isDate(v) {
		what = "MCP-Protocol-Version " + quote(v) + " is not a protocol version (YYYY-MM-DD)"
	}
	return "", unsupportedVersion(what+": this server serves "+list(served), v, served)
}

// unsupportedVersion returns the refusal of a request whose protocol
// version is not served: 400 protocol_version whose error has the code
// and data of the UnsupportedProtocolVersionError (MCP 2026-07-28,
// basic/versioning, "Protocol Version Negotiation": code -32022, data
// supported and requested), which a client of either era can act on by
// retrying with a version of supported. message says what to send.
func unsupportedVersion(message, requested string, supported []string) *refusal {
	ref := refuse(replay.ReasonProtocolVersion, message)
	ref.rpcCode = mcp.CodeUnsupportedProtocolVersion
	ref.data = map[string]any{"supported": supported, "requested": requested}
	return ref
}

// list writes versions as an English list: "a, b and c".
func list(versions []string) string {
	if len(versions) < 2 {
		return strings.Join(versions, "")
	}
	return strings.Join(versions[:len(versions)-1], ", ") + " and " + versions[len(versions)-1]
}

func isDate(v string) bool {
	if len(v) != 10 || v[4] != '-' || v[7] != '-' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if i != 4 && i != 7 && (v[i] < '0' || v[i] > '9') {
			return false
		}
	}
	return true
}

// sessionID returns the Mcp-Session-Id header ("" when absent), or a
// refusal when it is repeated, too long or not visible ASCII (MCP
// 2025-11-25, "Session Management": 0x21 to 0x7E).
func sessionID(r *http.Request) (string, *refusal) {
	vals := r.Header.Values("Mcp-Session-Id")
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 {
		return "", refuse(replay.ReasonSessionIDInvalid, "Mcp-Session-Id header is repeated")
	}
	v := vals[0]
	if len(v) > MaxSessionIDLen {
		return "", refuse(replay.ReasonSessionIDInvalid, "Mcp-Session-Id is longer than 128 bytes")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", refuse(replay.ReasonSessionIDInvalid, "Mcp-Session-Id has a byte outside visible ASCII")
		}
	}
	return v, nil
}

// headers is what a request's MCP headers say (readHeaders), with the
// refusal each rule about them earns; a nil refusal is a rule passed.
type headers struct {
	version    string   // MCP-Protocol-Version, "" when absent or refused
	versionRef *refusal // repeated, malformed or not served (400 protocol_version)
	hasVersion bool     // MCP-Protocol-Version is present, served or not
	token      string   // Mcp-Session-Id, "" when absent or refused
	tokenRef   *refusal // repeated, too long or not visible ASCII (400 session_id_invalid)
	cursors    []string // the values of Last-Event-ID
	resuming   bool     // Last-Event-ID is present: a GET that carries it is a resume
	media      *refusal // a POST's media rules, of either era (postMedia)
	post       *refusal // a POST's header rules, stateful era (postRules)
	get        *refusal // a GET's header rules, plain or resuming (getRules)
}

// readHeaders reads r's MCP headers once, with the refusals of their
// rules: the ones of every request, then those of r's method. served are
// the protocol versions the handler serves (servedVersions).
func readHeaders(r *http.Request, served []string) headers {
	var h headers
	h.version, h.versionRef = protocolVersion(r, served)
	h.hasVersion = len(r.Header.Values(wire.HeaderProtocolVersion)) > 0
	h.token, h.tokenRef = sessionID(r)
	h.cursors, h.resuming = r.Header["Last-Event-Id"]
	switch r.Method {
	case http.MethodPost:
		h.media = postMedia(r)
		h.post = postRules(h)
	case http.MethodGet:
		h.get = getRules(r, h)
	}
	return h
}

// postRules returns the refusal of the header rules of a POST of the
// stateful era, in this order: postMedia's (415, 406, 415), then
// Last-Event-ID belongs on GET only (400 last_event_id_on_post).
func postRules(h headers) *refusal {
	if h.media != nil {
		return h.media
	}
	if len(h.cursors) > 0 {
		return refuse(replay.ReasonLastEventIDOnPost, "Last-Event-ID is only meaningful on GET: resume a stream with GET")
	}
	return nil
}

// postMedia applies the media rules of a POST of either era, in this
// order: Content-Type must be application/json (415 content_type), Accept
// must admit application/json and text/event-stream (406 not_acceptable),
// and the body must not be content-encoded (415 content_type).
func postMedia(r *http.Request) *refusal {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != mediaJSON {
		return refuse(replay.ReasonContentType, "Content-Type must be application/json, not "+quote(r.Header.Get("Content-Type")))
	}
	if !accepts(r, mediaJSON) || !accepts(r, mediaSSE) {
		return refuse(replay.ReasonNotAcceptable, "Accept must list both application/json and text/event-stream")
	}
	for _, v := range r.Header.Values("Content-Encoding") {
		for ce := range strings.SplitSeq(v, ",") {
			if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
				return refuse(replay.ReasonContentType, "Content-Encoding "+quote(ce)+" is not accepted: send the JSON body uncompressed")
			}
		}
	}
	return nil
}

// getRules returns the refusal of the header rules of a GET, plain or
// resuming, in this order: Accept admits text/event-stream (406
// not_acceptable), Mcp-Session-Id is well formed (400 session_id_invalid)
// and present (400 session_required: row 1 of the replay decision).
func getRules(r *http.Request, h headers) *refusal {
	switch {
	case !accepts(r, mediaSSE):
		return refuse(replay.ReasonNotAcceptable, "GET must accept text/event-stream")
	case h.tokenRef != nil:
		return h.tokenRef
	case h.token == "":
		return refuse(replay.ReasonSessionRequired, "Mcp-Session-Id header is required on GET")
	}
	return nil
}

// accepts reports whether the Accept header admits mediaType (exactly, by
// its type wildcard, or by */*).
func accepts(r *http.Request, mediaType string) bool {
	major, _, _ := strings.Cut(mediaType, "/")
	// The most specific matching range decides (RFC 9110 §12.5.1): the
	// type itself, then type/*, then */*; a quality of 0 refuses.
	best, ok := 0, false
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, _ := strings.Cut(part, ";")
			mt = strings.ToLower(strings.TrimSpace(mt))
			rank := 0
			switch mt {
			case mediaType:
				rank = 3
			case major + "/*":
				rank = 2
			case "*/*":
				rank = 1
			}
			if rank > best {
				best, ok = rank, !refused(params)
			}
		}
	}
	return ok
}

// refused reports whether an Accept entry's parameters give it the quality
// 0, which marks its media type as not acceptable (RFC 9110 §12.4.2).
func refused(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && q == 0
		}
	}
	return false
}

// repeatedRoutingHeader returns the refusal of a request of the
// sessionless revision that sends Mcp-Method, Mcp-Name or an Mcp-Param-*
// header more than once (400 header_mismatch, JSON-RPC error -32020,
// mcp.CodeHeaderMismatch), else nil. These headers repeat what the body
// says so that intermediaries can route on it (MCP 2026-07-28,
// basic/transports; SEP-2243), and the go-sdk checks only the first of
// several: an intermediary that routes on another value would act on a
// request the server does not serve.
func repeatedRoutingHeader(r *http.Request) *refusal {
	for name, vals := range r.Header {
		if len(vals) > 1 && (name == wire.HeaderMethod || name == wire.HeaderName || strings.HasPrefix(name, "Mcp-Param-")) {
			return refuse(replay.ReasonHeaderMismatch, "the "+name+" header is sent more than once: send it once")
		}
	}
	return nil
}
