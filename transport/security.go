// security.go holds the checks every request passes first: the Via that
// would make it go round a loop, and the DNS-rebinding defences, the Host of
// a request on a loopback listener and its Origin.

package transport

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/tidemark-mcp/tidemark/internal/via"
	"github.com/tidemark-mcp/tidemark/replay"
)

// checkLoop refuses a request whose Via header already names this process
// (package via) with 508 loop_detected (RFC 5842, section 7.2): a gateway
// of this process sent it, and its upstream led back here, directly or
// through other gateways or a load balancer. Served, it would open another
// upstream request to the same place, without end.
func checkLoop(r *http.Request) *refusal {
	if !via.Loops(r.Header) {
		return nil
	}
	return refuse(replay.ReasonLoopDetected, "this request came back to the server that sent it upstream (its Via header names "+
		via.Pseudonym()+"): the gateway's --upstream leads back to itself; point --upstream at the MCP server, not at a gateway in front of it")
}

// GuardOriginAndHost returns next behind the DNS-rebinding defences of the
// MCP endpoint (the checks of Handler.ServeHTTP's first step, with opts'
// AllowedOrigins and DisableLocalhostProtection): a request they refuse
// gets 403 host_forbidden or origin_forbidden with a JSON-RPC error body,
// logged at DEBUG on opts.Logger, and never reaches next. It is for the
// other listeners of a server that a page of a foreign origin must not
// read either, such as tidemark serve's operator listener (metrics, token
// prefixes in the session inspector).
func GuardOriginAndHost(next http.Handler, opts Options) http.Handler {
	opts = opts.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := checkOriginAndHost(r, &opts); ref != nil {
			closeUntilBodyRead(w, r)
			ref.write(w, opts.Logger, nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkOriginAndHost applies the two DNS-rebinding defences (MCP
// 2025-11-25, basic/transports "Security Warning", and
// basic/security_best_practices "Local MCP Server Compromise"):
//   - a request that reached a loopback listener must name a loopback host
//     in Host, else 403 host_forbidden;
//   - a request with an Origin header must come from the request's own host
//     or an allowed origin, else 403 origin_forbidden.
func checkOriginAndHost(r *http.Request, opts *Options) *refusal {
	if !opts.DisableLocalhostProtection {
		if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && addr != nil {
			if isLoopbackAddr(addr) && !isLoopback(r.Host) {
				return refuse(replay.ReasonHostForbidden, "Host "+quote(r.Host)+" is not a loopback name on a loopback listener (DNS rebinding protection)")
			}
		}
	}
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		return nil
	}
	if len(origins) > 1 {
		return refuse(replay.ReasonOriginForbidden, "Origin header is repeated")
	}
	if !originAllowed(origins[0], r.Host, opts.AllowedOrigins) {
		return refuse(replay.ReasonOriginForbidden, "Origin "+quote(origins[0])+" is not allowed")
	}
	return nil
}

func originAllowed(origin, host string, allowed []string) bool {
	for _, o := range allowed {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // "null" and opaque origins are never same-origin
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	// A browser page on localhost talking to a local server on another
	// port is the common development setup; it cannot be a rebinding
	// attack when both names are loopback.
	return isLoopback(u.Host) && isLoopback(host)
}

// isLoopbackAddr reports whether addr, a listener's address, is a loopback
// address; a TCP address is read as it is, without formatting it (which
// allocates on every request).
func isLoopbackAddr(addr net.Addr) bool {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return isLoopback(addr.String())
}

// isLoopback reports whether hostport names localhost or a loopback address.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
