// Command connect-host is an MCP host for the official conformance suite
// (@modelcontextprotocol/conformance) in client mode: the client the suite
// tests is `tidemark connect`, which this program starts and speaks to over
// stdio as a desktop host does (docs/connect.md):
//
//	conformance client --command "connect-host --tidemark PATH" --scenario sse-retry
//
// The suite starts a test server, then runs the command with the server's
// URL as the last argument, the scenario's name in
// $MCP_CONFORMANCE_SCENARIO and the protocol version in
// $MCP_CONFORMANCE_PROTOCOL_VERSION (default 2025-11-25). connect-host
// runs `tidemark connect [--arg ...] URL` and, over the bridge:
//
//   - initialize: initialize, notifications/initialized.
//   - tools_call: that, tools/list, then tools/call add_numbers with a=5,
//     b=3.
//   - sse-retry: that, then tools/call test_reconnection, whose stream the
//     server closes after a priming event with retry 500 ms; the bridge
//     must resume it with GET and Last-Event-ID no sooner (SEP-1699) and
//     hand the host the result.
//
// Any other scenario initializes and lists the tools. Then connect-host
// closes the bridge's stdin, as a host that quits does, and waits for it
// to exit 0. The exit code is 0 when every step succeeded, 1 otherwise
// (the error on stderr, after the bridge's own log lines).
//
// The same scenarios are those of interop/conformance-client, which runs
// them with the client package directly.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// timeout bounds one scenario; the suite itself allows 30 seconds.
const timeout = 25 * time.Second

// closeGrace bounds how long the bridge may take to exit once its stdin
// closed (it ends the server's session with DELETE first).
const closeGrace = 5 * time.Second

// args collects the repeatable --arg flag.
type args []string

func (a *args) String() string     { return fmt.Sprint(*a) }
func (a *args) Set(s string) error { *a = append(*a, s); return nil }

func main() {
	fs := flag.NewFlagSet("connect-host", flag.ExitOnError)
	tidemark := fs.String("tidemark", "tidemark", "path of the tidemark binary whose connect command is the client under test")
	var extra args
	fs.Var(&extra, "arg", "an argument given to `tidemark connect` before the URL (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: connect-host [--tidemark PATH] [--arg ARG]... URL (scenario in $MCP_CONFORMANCE_SCENARIO)")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	version := os.Getenv("MCP_CONFORMANCE_PROTOCOL_VERSION")
	if version == "" {
		version = "2025-11-25"
	}
	cmd := exec.Command(*tidemark, append(append([]string{"connect"}, extra...), fs.Arg(0))...)
	cmd.Stderr = os.Stderr
	if err := run(cmd, os.Getenv("MCP_CONFORMANCE_SCENARIO"), version); err != nil {
		fmt.Fprintf(os.Stderr, "connect-host: %v\n", err)
		os.Exit(1)
	}
}

// run starts the bridge cmd and plays the scenario through it.
func run(cmd *exec.Cmd, scenario, version string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h, err := startHost(cmd)
	if err != nil {
		return fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	err = steps(ctx, h, scenario, version)
	if cerr := h.close(closeGrace); err == nil && cerr != nil {
		err = fmt.Errorf("tidemark connect after the host closed its stdin: %w", cerr)
	}
	if s := h.strays(); err == nil && len(s) > 0 {
		err = fmt.Errorf("tidemark connect wrote %d lines that are not JSON-RPC, the first: %q", len(s), s[0])
	}
	return err
}

// steps plays scenario over h.
func steps(ctx context.Context, h *host, scenario, version string) error {
	if _, err := h.initialize(ctx, version); err != nil {
		return err
	}
	switch scenario {
	case "initialize":
		return nil
	case "tools_call":
		if _, _, err := h.call(ctx, "tools/list", map[string]any{}); err != nil {
			return err
		}
		return callTool(ctx, h, "add_numbers", map[string]any{"a": 5, "b": 3})
	case "sse-retry":
		return callTool(ctx, h, "test_reconnection", map[string]any{})
	default:
		_, _, err := h.call(ctx, "tools/list", map[string]any{})
		return err
	}
}

// callTool calls the tool name with arguments and prints its text.
func callTool(ctx context.Context, h *host, name string, arguments map[string]any) error {
	res, _, err := h.call(ctx, "tools/call", map[string]any{"name": name, "arguments": arguments})
	if err != nil {
		return err
	}
	text, err := toolText(res)
	if err != nil {
		return fmt.Errorf("tools/call %s: %w", name, err)
	}
	fmt.Printf("%s: %s\n", name, text)
	return nil
}
