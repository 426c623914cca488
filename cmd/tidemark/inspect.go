// inspect.go holds `tidemark inspect`: the session and task inspectors of
// a running tidemark serve, read from its operator's listener
// (--metrics-addr, /debug/sessions, /debug/tasks) and printed for a person.

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
)

// inspectConfig holds the flags of `tidemark inspect`.
type inspectConfig struct {
	metricsAddr   string
	recent        int
	json          bool
	tasks         bool // --tasks: the tasks the server runs instead of its sessions
	timeout       time.Duration
	fleet         bool   // --fleet: read every replica's sessions from --redis
	redisURL      string // --redis, as given
	redisPassFile string // --redis-password-file
}

func inspectFlags(stderr io.Writer) (*flag.FlagSet, *inspectConfig) {
	c := &inspectConfig{}
	fs := flag.NewFlagSet("tidemark inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "the --metrics-addr of the tidemark serve to inspect (host:port or http:// URL; required without --fleet)")
	fs.IntVar(&c.recent, "recent", admin.DefaultRecent, "without a token prefix: how many of the most recently used sessions to list (sessions)")
	fs.BoolVar(&c.json, "json", false, "print the inspector's JSON answer as it is")
	fs.BoolVar(&c.tasks, "tasks", false, "list the tasks the server runs (/debug/tasks), or with a task ID prefix show their stored state, instead of sessions")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the request to the server, or on reading Redis with --fleet (duration, more than 0)")
	fs.BoolVar(&c.fleet, "fleet", false, "list the sessions of every replica of a fleet, with their owner, generation and lease, read from the fleet's Redis (--redis) instead of one server's listener")
	fs.StringVar(&c.redisURL, "redis", "", "with --fleet: the fleet's Redis, as tidemark serve --redis names it, or host:port for redis://HOST:PORT/0 (URL or host:port)")
	fs.StringVar(&c.redisPassFile, "redis-password-file", "", "with --fleet: file whose first line is the Redis password, as for tidemark serve; $TIDEMARK_REDIS_PASSWORD may hold the password itself (path; empty: the URL's password, if any)")
	return fs, c
}

// inspect runs `tidemark inspect [flags] [TOKEN-PREFIX]`: without a prefix
// it lists the sessions, with one it details those whose token starts with
// it; with --tasks the same of the tasks the server runs, by task ID
// prefix. Exit codes: 0, 1 when the server cannot be asked or knows no such
// session, 2 on a usage error.
func inspect(args []string, stdout, stderr io.Writer) int {
	fs, c := inspectFlags(stderr)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if c.redisURL != "" || c.redisPassFile != "" || c.fleet {
		if err := c.checkFleet(); err != nil {
			fmt.Fprintf(stderr, "tidemark inspect: %v\n", err)
			return 2
		}
	}
	switch {
	case c.timeout <= 0:
		fmt.Fprintf(stderr, "tidemark inspect: --timeout %v: want a positive duration\n", c.timeout)
		return 2
	case c.fleet && c.tasks:
		fmt.Fprintln(stderr, "tidemark inspect: --tasks reads one server's listener (--metrics-addr), not a fleet's Redis: drop --fleet")
		return 2
	case c.fleet && fs.NArg() > 1:
		fmt.Fprintf(stderr, "tidemark inspect: want at most one token prefix, got %d arguments\n", fs.NArg())
		return 2
	case c.fleet && c.recent < 0:
		fmt.Fprintf(stderr, "tidemark inspect: --recent %d: want 0 or more sessions\n", c.recent)
		return 2
	case c.fleet:
		return inspectFleet(c, fs.Arg(0), stdout, stderr)
	case c.metricsAddr == "":
		fmt.Fprintln(stderr, "tidemark inspect: --metrics-addr is required: want the address tidemark serve --metrics-addr listens on, e.g. --metrics-addr 127.0.0.1:9464 (or --fleet with --redis)")
		return 2
	case fs.NArg() > 1:
		fmt.Fprintf(stderr, "tidemark inspect: want at most one token prefix, got %d arguments\n", fs.NArg())
		return 2
	case c.recent < 0:
		fmt.Fprintf(stderr, "tidemark inspect: --recent %d: want 0 or more sessions\n", c.recent)
		return 2
	}
	base, err := admin.BaseURL(c.metricsAddr)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark inspect: --metrics-addr %q: %v\n", c.metricsAddr, err)
		return 2
	}
	u := base + "/debug/sessions"
	switch {
	case c.tasks:
		u = base + "/debug/tasks"
		if fs.NArg() == 1 {
			u += "/" + url.PathEscape(fs.Arg(0))
		}
	case fs.NArg() == 1:
		u += "/" + url.PathEscape(fs.Arg(0))
	default:
		u += "?n=" + strconv.Itoa(c.recent)
	}
	body, status, err := fetchJSON(u, c.timeout)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark inspect: %v (is tidemark serve running with --metrics-addr %s?)\n", err, c.metricsAddr)
		return 1
	}
	if status != http.StatusOK {
		fmt.Fprintf(stderr, "tidemark inspect: %s %s\n", u, admin.Explain(status, body, "--metrics-addr"))
		return 1
	}
	if c.json {
		stdout.Write(body)
		return 0
	}
	if c.tasks {
		return printTaskAnswer(stdout, stderr, u, body, fs.NArg() == 1)
	}
	if fs.NArg() == 1 {
		var d admin.Details
		if err := json.Unmarshal(body, &d); err != nil {
			fmt.Fprintf(stderr, "tidemark inspect: %s: %v\n", u, err)
			return 1
		}
		printDetails(stdout, d, time.Now())
		return 0
	}
	var l admin.List
	if err := json.Unmarshal(body, &l); err != nil {
		fmt.Fprintf(stderr, "tidemark inspect: %s: %v\n", u, err)
		return 1
	}
	printList(stdout, l)
	return 0
}

// fetchJSON GETs u and returns its body and status.
func fetchJSON(u string, timeout time.Duration) ([]byte, int, error) {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(u)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return body, resp.StatusCode, err
}

// printList prints /debug/sessions as a table.
func printList(w io.Writer, l admin.List) {
	noun := "sessions"
	if l.Count == 1 {
		noun = "session"
	}
	switch {
	case l.Hibernated == 0:
		fmt.Fprintf(w, "%d %s live in this process", l.Count, noun)
	case l.Count == 1:
		fmt.Fprint(w, "1 session in this process, hibernated")
	default:
		fmt.Fprintf(w, "%d %s in this process, %d of them hibernated", l.Count, noun, l.Hibernated)
	}
	if len(l.Sessions) == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "; the %d most recently used:\n", len(l.Sessions))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATE\tGENERATION\tCALLS\tREADERS\tIDLE")
	for _, s := range l.Sessions {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", s.Session, s.State, s.Generation, s.CallsInFlight, s.Readers, seconds(s.IdleSeconds))
	}
	tw.Flush()
}

// printDetails prints /debug/sessions/{prefix}, one block per session.
func printDetails(w io.Writer, d admin.Details, now time.Time) {
	for i, s := range d.Sessions {
		if i > 0 {
			fmt.Fprintln(w)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "session\t%s\n", s.Session)
		fmt.Fprintf(tw, "state\t%s\n", s.State)
		fmt.Fprintf(tw, "generation\t%d\n", s.Generation)
		if s.ProtocolVersion != "" {
			fmt.Fprintf(tw, "protocol version\t%s\n", s.ProtocolVersion)
		}
		fmt.Fprintf(tw, "replay floor\t%d\n", s.ReplayFloor)
		fmt.Fprintf(tw, "high-water mark\t%d\n", s.HighWaterMark)
		fmt.Fprintf(tw, "retained\t%d events, %d bytes\n", s.Events, s.Bytes)
		lease := "no expiry (held while the process lives)"
		if s.LeaseExpiry != nil {
			lease = fmt.Sprintf("until %s (in %s)", s.LeaseExpiry.Format(time.RFC3339), s.LeaseExpiry.Sub(now).Round(time.Millisecond))
		}
		if s.State == admin.StateHibernated {
			fmt.Fprintf(tw, "owner\tnone: hibernated, the next request wakes it\n")
		} else {
			fmt.Fprintf(tw, "owner\t%s, lease %s\n", s.Owner, lease)
		}
		fmt.Fprintf(tw, "created\t%s\n", s.Created.Format(time.RFC3339))
		fmt.Fprintf(tw, "idle\t%s\n", seconds(s.IdleSeconds))
		fmt.Fprintf(tw, "calls in flight\t%d\n", s.CallsInFlight)
		fmt.Fprintf(tw, "readers\t%d\n", s.Readers)
		tw.Flush()
		if len(s.Streams) == 0 {
			fmt.Fprintln(w, "streams: none open")
			continue
		}
		fmt.Fprintln(w, "streams:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  STREAM\tCALLS\tREADERS")
		for _, st := range s.Streams {
			name := strconv.FormatUint(st.Stream, 10)
			if st.Stream == 0 {
				name = "0 (standalone)"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\n", name, st.CallsInFlight, st.Readers)
		}
		tw.Flush()
	}
}

// seconds formats a number of seconds as a duration rounded to the
// millisecond.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
