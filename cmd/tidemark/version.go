package main

// `tidemark version`, `tidemark --version` and `tidemark serve --version`:
// which build of tidemark this binary is (admin.Build).

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/tidemark-mcp/tidemark/admin"
)

// printVersion writes b for a person and for scripts, one "name: value"
// line each: version, commit, modified, date (the commit's time) and go.
// A value the binary does not hold reads "unknown".
func printVersion(w io.Writer, b admin.Build) {
	or := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "version:\t%s\n", or(b.Version))
	fmt.Fprintf(tw, "commit:\t%s\n", or(b.Revision))
	modified := "unknown"
	if b.Revision != "" {
		modified = fmt.Sprint(b.Modified)
	}
	fmt.Fprintf(tw, "modified:\t%s\n", modified)
	fmt.Fprintf(tw, "date:\t%s\n", or(b.Time))
	fmt.Fprintf(tw, "go:\t%s\n", or(b.GoVersion))
	tw.Flush()
}
