// How a Report is written: a table for people, JSON for programs.

package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes r as a table: one row per check with its result, the
// HTTP statuses observed and what the server did, then a summary line.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "tidemark probe %s\nserver %s, protocol %s, tool %s\n\n", r.URL, orDash(r.Server), orDash(r.ProtocolVersion), r.Tool)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tSTATUSES\tOBSERVED")
	for _, c := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.ID, c.Verdict, statusList(c.Statuses), c.Observed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d checks: %d PASS, %d FAIL, %d N/A\n", len(r.Results), r.Pass, r.Fail, r.NA)
	return err
}

// WriteJSON writes r as one indented JSON object (Report's fields).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func statusList(s []int) string {
	if len(s) == 0 {
		return "-"
	}
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
