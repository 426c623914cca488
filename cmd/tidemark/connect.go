// connect.go holds `tidemark connect`: the stdio bridge a desktop host runs
// to reach a remote MCP server over resumable Streamable HTTP
// (internal/connect; docs/connect.md).

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/tidemark-mcp/tidemark/internal/connect"
	"github.com/tidemark-mcp/tidemark/internal/redact"
)

// connectConfig holds the flags of `tidemark connect`. Each flag's help
// text states its default and unit; the flag table of docs/connect.md is
// checked against them by TestDocsFlagTables.
type connectConfig struct {
	header        http.Header
	logFile       string
	logLevel      slog.Level
	maxCalls      int
	maxQueued     int
	protocol      string
	resumeTimeout time.Duration
	startTimeout  time.Duration
	version       bool
	oauth         oauthConfig
}

func connectFlags(stderr io.Writer) (*flag.FlagSet, *connectConfig) {
	c := &connectConfig{header: make(http.Header)}
	fs := flag.NewFlagSet("tidemark connect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tidemark connect [flags] URL\n\nBridges a host that speaks MCP over stdio (stdin, stdout) to the Streamable HTTP\nMCP server at URL, resuming cut streams and starting a new session when the\nserver loses one. Logs go to stderr.\nExit code: 0 when the host closes stdin, 1 when the server cannot be reached\nat start, 2 on a usage error.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.Func("header", "NAME: VALUE added to every request to the server, e.g. \"Authorization: Bearer ${TOKEN}\"; ${VAR} is replaced by the environment variable VAR, $$ by $ (repeatable)", func(s string) error {
		return addHeader(c.header, s, os.LookupEnv)
	})
	fs.StringVar(&c.logFile, "log-file", "", "also append the log lines to this file, created with mode 0600 (path; empty: stderr only)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN or ERROR")
	fs.IntVar(&c.maxCalls, "max-calls", connect.DefaultMaxCalls, "most of the host's calls in flight to the server at once; more wait in the bridge's queue, in the order they came, so that a burst never meets the server's per-session bound (calls)")
	fs.IntVar(&c.maxQueued, "max-queued-calls", connect.DefaultMaxQueued, "most of the host's calls waiting beyond --max-calls; past it a call is answered at once with -32603, error.data.reason too_many_calls, and not sent (calls)")
	fs.StringVar(&c.protocol, "protocol", connect.ProtocolAuto, "the era spoken to the server: auto (2025-11-25 when the server serves it, whose streams resume; 2026-07-28 when its server/discover lists nothing older), 2025-11-25 or 2026-07-28 (sessionless: tool calls run as tasks when the server offers the Tasks extension)")
	fs.DurationVar(&c.resumeTimeout, "resume-timeout", connect.DefaultResumeTimeout, "how long a call waits on a cut stream, an unreachable server, 503s or a new session before it fails toward the host (duration)")
	fs.DurationVar(&c.startTimeout, "start-timeout", connect.DefaultStartTimeout, "how long the host's first initialize retries a server it cannot connect to before tidemark connect exits 1 (duration; 0s: no retry)")
	c.oauth.register(fs)
	fs.BoolVar(&c.version, "version", false, "print the version, commit, commit date and Go version of this build, and exit")
	return fs, c
}

// addHeader adds the header line s, "NAME: VALUE", to h, after replacing
// ${VAR} and $VAR in it by the variables lookup finds (os.Expand; $$ is a
// $). An unset variable, a line without a colon, and a name or value
// net/http would refuse to send (RFC 9110, section 5.5) are refused; the
// error never repeats the value, which may hold a credential.
func addHeader(h http.Header, s string, lookup func(string) (string, bool)) error {
	var unset []string
	expanded := os.Expand(s, func(name string) string {
		if name == "$" {
			return "$"
		}
		v, ok := lookup(name)
		if !ok {
			unset = append(unset, name)
		}
		return v
	})
	if len(unset) > 0 {
		return fmt.Errorf("want NAME: VALUE whose ${VAR} are set; not set: %s", strings.Join(unset, ", "))
	}
	name, value, ok := strings.Cut(expanded, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || !httpguts.ValidHeaderFieldName(name) || value == "" || !httpguts.ValidHeaderFieldValue(value) {
		return errors.New(`want NAME: VALUE, e.g. "Authorization: Bearer ${TOKEN}"`)
	}
	h.Add(name, value)
	return nil
}

// runConnect runs `tidemark connect [flags] URL` on the process's stdin
// and stdout: exit code 0 when the host closes stdin or a signal stops
// it, 1 when the server cannot be reached at start or the host's input
// cannot be read, 2 on a usage error.
func runConnect(args []string, stdout, stderr io.Writer) int {
	fs, c := connectFlags(stderr)
	if code, ok := parseCommand(fs, args, &c.version, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		hint := ""
		if fs.NArg() > 1 && strings.HasPrefix(fs.Arg(1), "-") {
			hint = ": flags go before the URL (tidemark connect [flags] URL)"
		}
		fmt.Fprintf(stderr, "tidemark connect: want one URL argument, got %d%s\n", fs.NArg(), hint)
		return 2
	}
	url := fs.Arg(0)
	if err := checkHTTPURL("", url, "an MCP endpoint, e.g. https://mcp.example.com/mcp"); err != nil {
		fmt.Fprintf(stderr, "tidemark connect: URL %q: want an absolute http:// or https:// URL of an MCP endpoint\n", redact.URL(url))
		return 2
	}
	if c.resumeTimeout <= 0 || c.startTimeout < 0 {
		fmt.Fprintln(stderr, "tidemark connect: --resume-timeout must be positive, --start-timeout 0 or more")
		return 2
	}
	if c.maxCalls <= 0 || c.maxQueued <= 0 {
		fmt.Fprintf(stderr, "tidemark connect: --max-calls %d, --max-queued-calls %d: want a positive number of calls for each\n", c.maxCalls, c.maxQueued)
		return 2
	}
	switch c.protocol {
	case connect.ProtocolAuto, connect.ProtocolStateful, connect.ProtocolSessionless:
	default:
		fmt.Fprintf(stderr, "tidemark connect: --protocol %q: want auto, %s or %s\n", c.protocol, connect.ProtocolStateful, connect.ProtocolSessionless)
		return 2
	}
	if fi, err := os.Stat(c.logFile); c.logFile != "" && err == nil && fi.IsDir() {
		fmt.Fprintf(stderr, "tidemark connect: --log-file %q: a directory: want the path of a file\n", c.logFile)
		return 2
	}
	logOut := stderr
	if c.logFile != "" {
		f, err := os.OpenFile(c.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "tidemark connect: --log-file: %v\n", err)
			return 1
		}
		defer f.Close()
		logOut = io.MultiWriter(stderr, f)
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: c.logLevel}))
	oauth, err := c.oauth.transport(url, c.header, stderr, logger)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark connect: %v\n", err)
		return 2
	}
	var httpClient *http.Client // nil: connect.Options' default
	if oauth != nil {
		defer oauth.Close()
		httpClient = &http.Client{Transport: oauth}
	}
	startTimeout := c.startTimeout
	if startTimeout == 0 {
		startTimeout = -1 // connect.Options: negative is no retry
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	host, err := (&connect.HostTransport{Reader: os.Stdin, Writer: os.Stdout, Logger: logger}).Connect(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark connect: %v\n", err)
		return 1
	}
	defer host.Close()
	logger.Debug("connect: bridging stdio to the MCP server", "url", redact.URL(url))
	err = connect.Run(ctx, host, connect.Options{
		URL:           url,
		Header:        c.header,
		HTTPClient:    httpClient,
		ResumeTimeout: c.resumeTimeout,
		StartTimeout:  startTimeout,
		MaxCalls:      c.maxCalls,
		MaxQueued:     c.maxQueued,
		Logger:        logger,
		Protocol:      c.protocol,
		// The probe of --protocol auto never starts an authorization.
		ProbeHTTPClient: &http.Client{},
	})
	if err != nil {
		fmt.Fprintf(stderr, "tidemark connect: %v\n", err)
		return 1
	}
	return 0
}
