package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	tmprobe "github.com/tidemark-mcp/tidemark/internal/probe"
	"github.com/tidemark-mcp/tidemark/internal/redact"
)

// probeConfig holds the flags of `tidemark probe`. Each flag's help text
// states its default and unit; the flag table of docs/probe.md is checked
// against them by TestDocsFlagTables.
type probeConfig struct {
	tool            string
	args            string
	retentionEvents int
	storm           int
	jsonOut         bool
	timeout         time.Duration
}

func probeFlags(stderr io.Writer) (*flag.FlagSet, *probeConfig) {
	c := &probeConfig{}
	fs := flag.NewFlagSet("tidemark probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tidemark probe [flags] URL\n\nChecks how the MCP server at URL (Streamable HTTP) resumes streams.\nExit code: 0 when no check fails, 1 when one does, 2 on a usage error.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.tool, "tool", tmprobe.DefaultTool, "tool whose call makes the long stream the checks cut and resume; it should send several progress notifications and never ask the client anything")
	fs.StringVar(&c.args, "args", tmprobe.DefaultArgs, "arguments of the tool call (a JSON object); every call also carries a progress token")
	fs.IntVar(&c.retentionEvents, "retention-events", 0, "the server's per-session event retention (events); runs the compacted-cursor check (0: that check is N/A)")
	fs.IntVar(&c.storm, "storm", tmprobe.DefaultStorm, "sessions that resume at once in the storm check (sessions; 0: that check is N/A)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the report as JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", tmprobe.DefaultTimeout, "bound on each check (duration)")
	return fs, c
}

// probe runs `tidemark probe`: exit code 0 when no check fails, 1 when one
// does or the probe cannot run, 2 on a usage error.
func probe(args []string, stdout, stderr io.Writer) int {
	fs, c := probeFlags(stderr)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		// The flag package stops at the first argument that is not a flag,
		// so flags after the URL arrive here as arguments: the error says
		// where they go.
		hint := ""
		if fs.NArg() > 1 && strings.HasPrefix(fs.Arg(1), "-") {
			hint = ": flags go before the URL (tidemark probe [flags] URL)"
		}
		fmt.Fprintf(stderr, "tidemark probe: want one URL argument, got %d%s\n", fs.NArg(), hint)
		fs.Usage()
		return 2
	}
	if u, err := url.Parse(fs.Arg(0)); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "tidemark probe: URL %q: want an http:// or https:// URL of an MCP endpoint, e.g. http://127.0.0.1:8080/mcp\n", redact.URL(fs.Arg(0)))
		return 2
	}
	if strings.TrimSpace(c.tool) == "" {
		fmt.Fprintf(stderr, "tidemark probe: --tool %q: want the name of a tool of the server\n", c.tool)
		return 2
	}
	var argsObj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.args), &argsObj); err != nil || argsObj == nil {
		fmt.Fprintf(stderr, "tidemark probe: --args %q: want a JSON object (the tool's arguments)\n", c.args)
		return 2
	}
	if c.retentionEvents < 0 || c.storm < 0 || c.timeout <= 0 {
		fmt.Fprintf(stderr, "tidemark probe: --retention-events and --storm must be 0 or more, --timeout positive\n")
		return 2
	}
	storm := c.storm
	if storm == 0 {
		storm = -1 // the probe's "not run"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := tmprobe.Run(ctx, tmprobe.Config{
		URL:             fs.Arg(0),
		Tool:            c.tool,
		Args:            json.RawMessage(c.args),
		RetentionEvents: c.retentionEvents,
		Storm:           storm,
		Timeout:         c.timeout,
	})
	if err != nil {
		fmt.Fprintf(stderr, "tidemark probe: %v\n", err)
		if rep == nil {
			rep = &tmprobe.Report{URL: redact.URL(fs.Arg(0)), Tool: c.tool}
		}
		rep.Error = err.Error()
		if rep.Results == nil {
			rep.Results = []tmprobe.Result{}
		}
		// With --json, stdout is a report even then: a script reading it
		// gets the reason, not an empty document.
		if len(rep.Results) == 0 && !c.jsonOut {
			return 1
		}
	}
	if c.jsonOut {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tidemark probe: %v\n", err)
		return 1
	}
	if rep.Failed() || len(rep.Results) < len(tmprobe.CheckIDs()) {
		return 1
	}
	return 0
}
