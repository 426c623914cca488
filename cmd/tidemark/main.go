// Command tidemark serves MCP over resumable Streamable HTTP.
//
// Usage:
//
//	tidemark serve [flags]     serve the built-in demo server
//	tidemark serve [flags] --stdio -- COMMAND [ARGS...]
//	                           gateway mode: serve a stdio MCP server, one
//	                           subprocess per session generation
//	tidemark serve [flags] --upstream URL
//	                           gateway mode: serve the Streamable HTTP MCP
//	                           server at URL, one upstream session per
//	                           session generation
//	tidemark probe [flags] URL check how the MCP server at URL resumes streams
//	tidemark connect [flags] URL
//	                           bridge a host that speaks MCP over stdio to
//	                           the Streamable HTTP MCP server at URL
//	tidemark inspect [flags] [TOKEN-PREFIX]
//	                           show the sessions of a running tidemark serve
//	                           (its --metrics-addr listener), with --tasks the
//	                           tasks it runs, or with --fleet the sessions of
//	                           every replica (the fleet's Redis)
//	tidemark ready [flags]     exit 0 when a running tidemark serve is ready
//	                           (its --metrics-addr listener's /readyz), 1 when
//	                           not: a health check for images without a shell
//	tidemark version           print the release this binary was built as, its
//	                           Go release, platform, commit and commit date
//	                           (also --version)
//	tidemark help              print this text
//
// Run `tidemark serve -h`, `tidemark probe -h`, `tidemark connect -h`, `tidemark inspect -h` or
// `tidemark ready -h` for the flags; docs/operating.md (serve, inspect), docs/probe.md (probe) and
// docs/connect.md (connect) list them with their defaults.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `tidemark serves MCP over resumable Streamable HTTP.

Usage:
  tidemark serve [flags]   serve the built-in demo server: tools countdown,
                           echo, confirm and notify, resource demo://readme
  tidemark serve [flags] --stdio -- COMMAND [ARGS...]
                           gateway mode: serve the stdio MCP server COMMAND,
                           one subprocess per session generation
  tidemark serve [flags] --upstream URL
                           gateway mode: serve the Streamable HTTP MCP server
                           at URL, one upstream session per session generation
  tidemark probe [flags] URL
                           check how the MCP server at URL resumes streams
  tidemark connect [flags] URL
                           bridge a host that speaks MCP over stdio (a
                           desktop host's local server) to the Streamable
                           HTTP MCP server at URL, resuming its streams
  tidemark inspect [flags] [TOKEN-PREFIX]
                           show the sessions of a running tidemark serve,
                           read from its --metrics-addr listener, with
                           --tasks the tasks it runs, or with --fleet
                           --redis URL the sessions of every replica
  tidemark ready [flags]   exit 0 when a running tidemark serve is ready (its
                           --metrics-addr listener's /readyz), 1 when not:
                           a health check for images without a shell
  tidemark version         print the release this binary was built as, its
                           Go release, platform, commit and commit date
                           (also: tidemark --version)
  tidemark help            print this text

Run "tidemark serve -h", "tidemark probe -h", "tidemark connect -h",
"tidemark inspect -h" or "tidemark ready -h" for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the process exit code: 0 on success,
// 1 when the command failed, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "probe":
		return probe(args[1:], stdout, stderr)
	case "connect":
		return runConnect(args[1:], stdout, stderr)
	case "inspect":
		return inspect(args[1:], stdout, stderr)
	case "ready":
		return ready(args[1:], stdout, stderr)
	case "version", "--version":
		printVersion(stdout)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tidemark: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
