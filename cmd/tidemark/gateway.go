package main

// The choice of the MCP server `tidemark serve` serves: --stdio fronts a
// stdio MCP server (one subprocess per session generation), --upstream a
// Streamable HTTP MCP server (one upstream session per session
// generation), with its flags; without either, the built-in demo server
// (docs/gateways.md, "Gateways").

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/net/http/httpguts"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/engine/upstream"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// upstreamConfig holds the --upstream flags of `tidemark serve`.
type upstreamConfig struct {
	url            string // empty: no upstream
	header         http.Header
	forward        []string
	connectTimeout time.Duration
	timeout        time.Duration
	resumeTimeout  time.Duration
	oauth          upstreamOAuth
}

// upstreamFlags declares the --upstream flags on fs.
func upstreamFlags(fs *flag.FlagSet, c *upstreamConfig) {
	c.header = make(http.Header)
	fs.StringVar(&c.url, "upstream", "", "gateway mode: serve the Streamable HTTP MCP server at this URL, one upstream session per session generation (URL; empty: no upstream)")
	fs.Func("upstream-header", "with --upstream: NAME: VALUE added to every request to the upstream server, e.g. an Authorization of the gateway's own (repeatable)", func(s string) error {
		name, value, ok := strings.Cut(s, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		// The value is never repeated: it may hold a credential. A name or
		// value net/http would refuse to send (RFC 9110, section 5.5) fails
		// here, not as 503 upstream_unreachable on every request.
		if !ok || !httpguts.ValidHeaderFieldName(name) || value == "" || !httpguts.ValidHeaderFieldValue(value) {
			return errors.New(`want NAME: VALUE, e.g. "Authorization: Bearer TOKEN"`)
		}
		c.header.Add(name, value)
		return nil
	})
	fs.Func("upstream-forward-header", "with --upstream: NAME of a client request header copied to the upstream requests made for it, e.g. Authorization (repeatable)", func(s string) error {
		if !httpguts.ValidHeaderFieldName(s) {
			return fmt.Errorf("want a header name, not %q", s)
		}
		c.forward = append(c.forward, s)
		return nil
	})
	upstreamOAuthFlags(fs, &c.oauth)
	fs.DurationVar(&c.connectTimeout, "upstream-connect-timeout", upstream.DefaultConnectTimeout, "with --upstream: bound on connecting to the upstream server (TCP and TLS); a message for which no connection could be made by then gets 503 upstream_unreachable (duration)")
	fs.DurationVar(&c.timeout, "upstream-timeout", upstream.DefaultTimeout, "with --upstream: bound on writing a message to the upstream server, and on each exchange with it but the answer to a client request other than initialize: initialize until answered (else it fails with reason upstream_unreachable and the session does not begin), a notification or response until accepted, the restore of a re-created session, pings, DELETE (duration)")
	fs.DurationVar(&c.resumeTimeout, "upstream-resume-timeout", upstream.DefaultResumeTimeout, "with --upstream: how long a call whose upstream answer stream was cut is resumed upstream, or its upstream session checked, before the call fails (duration)")
}

// check validates the --upstream flags; the error is a usage error.
func (c *upstreamConfig) check(stdioMode bool, lookup func(string) (string, bool)) error {
	if err := c.oauth.check(c.header, c.forward, lookup); err != nil {
		return err
	}
	if c.url == "" {
		return nil // its flags are refused without it by checkOnlyWith
	}
	switch {
	case stdioMode:
		return errors.New("--upstream and --stdio exclude each other: serve one MCP server")
	case c.connectTimeout <= 0 || c.timeout <= 0 || c.resumeTimeout <= 0:
		return errors.New("--upstream-connect-timeout, --upstream-timeout and --upstream-resume-timeout must be positive")
	}
	if err := checkHTTPURL("upstream", c.url, "an MCP endpoint, e.g. http://127.0.0.1:3001/mcp"); err != nil {
		return err
	}
	// The engine refuses headers the gateway sets itself; asked now, it
	// says so before anything listens. It holds no connection yet.
	if _, err := upstream.New(upstream.Options{URL: c.url, Header: c.header, Forward: c.forward}); err != nil {
		return err
	}
	return nil
}

// resolveTimeout bounds the look-up of the --upstream host's addresses at
// start (notSelf).
const resolveTimeout = 2 * time.Second

// notSelf refuses an --upstream URL that names this server's own listener
// ln: every request would come back to the gateway, which would send it
// upstream again, to itself, without end. It resolves the URL's host; an
// address of the listener, or, when the listener takes every interface, a
// loopback address or one of this machine's, on the listener's port, is
// this server. A host that does not resolve passes: the loop that cannot be
// seen here is refused at run time with 508 loop_detected (package via).
func (c *upstreamConfig) notSelf(ln net.Addr) error {
	if c.url == "" {
		return nil
	}
	u, err := url.Parse(c.url)
	listen, ok := ln.(*net.TCPAddr)
	if err != nil || !ok {
		return nil // upstream.New refuses a URL that does not parse
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if port != strconv.Itoa(listen.Port) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil {
		return nil
	}
	local := localAddrs()
	for _, ip := range ips {
		ip = ip.Unmap()
		self := listen.IP.Equal(net.IP(ip.AsSlice())) ||
			(listen.IP.IsUnspecified() && (ip.IsLoopback() || local[ip]))
		if self {
			return fmt.Errorf("--upstream %s is this server's own address (it listens on %s): every request would come back to it without end; "+
				"point --upstream at the MCP server to front (e.g. --upstream http://127.0.0.1:3001/mcp), or give --addr another port", redact.URL(c.url), ln)
		}
	}
	return nil
}

// localAddrs returns the addresses of this machine's interfaces; none when
// they cannot be read.
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}

// engineHandler returns the handler of the MCP server that c serves and
// the function that ends its engine, and its bus, before the handler's
// Close: the demo server, with sealer for its requestState; a --stdio
// command, whose bridge seals the backend's requestState with sealer; both
// with the fleet's notification bus; or an --upstream server, which seals
// its own state and needs neither. The error is a usage error (a command
// not found, an invalid URL or header) or the bus's (Redis at --redis
// refuses its stream).
func (c *serveConfig) engineHandler(fs *flag.FlagSet, opts *tidemark.Options, logger *slog.Logger, sealer *requeststate.Sealer) (*tidemark.Handler, func(), error) {
	opts.Tasks = c.tasks.options(c.stdio || c.upstream.url != "")
	if c.upstream.url != "" {
		gateway, err := upstream.New(upstream.Options{
			URL: c.upstream.url, Header: c.upstream.header, Forward: c.upstream.forward,
			ConnectTimeout: c.upstream.connectTimeout, Timeout: c.upstream.timeout,
			ResumeTimeout: c.upstream.resumeTimeout, Logger: logger,
			TokenSource: c.upstream.oauth.tokenSource(c.upstream.url, c.upstream.timeout, logger),
		})
		if err != nil {
			return nil, nil, err
		}
		if c.auth.issuer != "" && slices.ContainsFunc(c.upstream.forward, func(name string) bool { return http.CanonicalHeaderKey(name) == "Authorization" }) {
			// Token passthrough (MCP 2025-11-25, basic/authorization,
			// "Token Passthrough"): the operator's explicit choice, said
			// once.
			logger.Warn("--upstream-forward-header Authorization passes each client's token, issued for this server, through to the upstream: use --upstream-oauth-token-url for a token of the gateway's own unless the upstream accepts this server's tokens")
		}
		// Requests of the sessionless era pass through to the upstream.
		opts.Transport.Sessionless = gateway.Sessionless()
		return tidemark.NewEngineHandler(gateway, opts), func() { gateway.Close() }, nil
	}
	// The demo's notify tool and the stdio bridge raise through the bus to
	// every replica.
	bus, closeBus, err := c.fleet.openBus(logger)
	if err != nil {
		return nil, nil, err
	}
	if c.stdio {
		h, closeGateway, err := c.stdioHandler(fs.Args(), opts, sealer, bus, logger)
		if err != nil {
			closeBus()
			return nil, nil, err
		}
		return h, func() { closeGateway(); closeBus() }, nil
	}
	if opts.Auth != nil {
		if err := knownTools(opts.Auth.ToolScopes, demo.ToolNames()); err != nil {
			closeBus()
			return nil, nil, err
		}
	}
	// The demo's handlers keep nothing per session: its sessions wake
	// from hibernation at the same generation.
	opts.Restorable = true
	server := demo.New(demo.Options{Sealer: sealer, Bus: bus, Server: &mcp.ServerOptions{SupportedProtocolVersions: c.protocolVersions()}})
	return tidemark.NewHandler(server, opts), closeBus, nil
}

// servedAttrs are the log attributes that say which MCP server is served.
func (c *serveConfig) servedAttrs(fs *flag.FlagSet) []any {
	switch {
	case c.stdio:
		return []any{"stdio", fs.Arg(0)}
	case c.upstream.url != "":
		return []any{"upstream", redact.URL(c.upstream.url)}
	}
	return nil
}

// knownTools refuses an --auth-tool-scope whose tool is not among tools,
// the demo server's, known at start: its scope would guard nothing, and
// the tool a typo meant would go unguarded. A gateway's tools are known
// only from its server, at a session's tools/list, so a gateway's names
// are not checked.
func knownTools(scopes map[string]string, tools []string) error {
	names := slices.Sorted(maps.Keys(scopes))
	for _, name := range names {
		if !slices.Contains(tools, name) {
			return fmt.Errorf("--auth-tool-scope %s=%s: the demo server has no tool %q: want one of %s", name, scopes[name], name, strings.Join(tools, ", "))
		}
	}
	return nil
}
