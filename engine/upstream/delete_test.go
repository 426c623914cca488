package upstream_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/engine/upstream"
)

// deleteAuthorizations returns the Authorization of each DELETE the
// upstream received, in order.
func deleteAuthorizations(up *testUpstream) []string { return deleteHeaders(up, "Authorization") }

// deleteHeaders returns header of each DELETE the upstream received, in
// order.
func deleteHeaders(up *testUpstream, header string) []string {
	var out []string
	for _, r := range up.requests(http.MethodDelete, "") {
		out = append(out, r.header.Get(header))
	}
	return out
}

// deletedSessions returns the upstream sessions a DELETE ended, sorted.
func deletedSessions(up *testUpstream) []string {
	out := deleteHeaders(up, "Mcp-Session-Id")
	slices.Sort(out)
	return out
}

// TestDeleteCarriesForwardedHeaders: with Options.Forward set, the DELETE
// that ends a live session's upstream session carries the forwarded
// headers of the session's latest client request, as its other requests
// do: an upstream that requires them would refuse the DELETE otherwise,
// and the upstream session would outlive the session.
func TestDeleteCarriesForwardedHeaders(t *testing.T) {
	up := newUpstream(t, mcp.StreamableHTTPOptions{})
	g := newGateway(t, up.URL(), upstream.Options{Forward: []string{"Authorization"}})
	ctx := testContext(t)
	g.client.Header = http.Header{"Authorization": {"Bearer one"}}
	s := g.initialize(t, ctx)
	g.client.Header = http.Header{"Authorization": {"Bearer two"}}
	echoAt(t, s, 2, 1)
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upstream's DELETE", func() bool { return len(deleteAuthorizations(up)) == 1 })
	if got := deleteAuthorizations(up); got[0] != "Bearer two" {
		t.Errorf("the DELETE of the upstream session carried Authorization %q, want the latest request's %q", got[0], "Bearer two")
	}
}
