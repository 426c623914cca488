// ready.go holds `tidemark ready`: the readiness of a running tidemark
// serve, asked of its operator's listener (--metrics-addr, /readyz) and
// given as an exit code, for container health checks where the image has
// no shell and no HTTP client but this binary (docs/deploying.md).

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
)

// readyConfig holds the flags of `tidemark ready`.
type readyConfig struct {
	metricsAddr string
	timeout     time.Duration
}

func readyFlags(stderr io.Writer) (*flag.FlagSet, *readyConfig) {
	c := &readyConfig{}
	fs := flag.NewFlagSet("tidemark ready", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "the --metrics-addr of the tidemark serve to check (host:port or http:// URL; required)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "bound on the request to the server (duration)")
	return fs, c
}

// ready runs `tidemark ready [flags]`: exit code 0 when /readyz answers
// 200, 1 when it answers anything else or cannot be asked (stderr says
// why: the reason and error of /readyz's body), 2 on a usage error.
func ready(args []string, stdout, stderr io.Writer) int {
	fs, c := readyFlags(stderr)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	switch {
	case c.metricsAddr == "":
		fmt.Fprintln(stderr, "tidemark ready: --metrics-addr is required: the address tidemark serve --metrics-addr listens on, e.g. --metrics-addr 127.0.0.1:9464")
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "tidemark ready: unexpected argument %q\n", fs.Arg(0))
		return 2
	case c.timeout <= 0:
		fmt.Fprintf(stderr, "tidemark ready: --timeout %v: want a positive duration\n", c.timeout)
		return 2
	}
	base, err := admin.BaseURL(c.metricsAddr)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark ready: --metrics-addr %q: %v\n", c.metricsAddr, err)
		return 2
	}
	u := base + "/readyz"
	body, status, err := fetchJSON(u, c.timeout)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark ready: %v (is tidemark serve running with --metrics-addr %s?)\n", err, c.metricsAddr)
		return 1
	}
	var r struct {
		Ready         bool
		Reason, Error string
	}
	decodeErr := json.Unmarshal(body, &r)
	if status == http.StatusOK {
		// Only tidemark serve's own answer counts: any other server's 200
		// at that address (a proxy's page, another program's listener)
		// says nothing of Tidemark's readiness.
		if decodeErr != nil || !r.Ready {
			fmt.Fprintf(stderr, "tidemark ready: %s %s\n", u, admin.Explain(status, body, "--metrics-addr"))
			return 1
		}
		fmt.Fprintln(stdout, "ready")
		return 0
	}
	if decodeErr != nil || r.Reason == "" {
		fmt.Fprintf(stderr, "tidemark ready: %s %s\n", u, admin.Explain(status, body, "--metrics-addr"))
		return 1
	}
	// The error of a check that names its reason starts with it
	// (admin.NotReadyError); it is said once.
	fmt.Fprintf(stderr, "tidemark ready: not ready (%d): %s: %s\n", status, r.Reason, strings.TrimPrefix(r.Error, r.Reason+": "))
	return 1
}
