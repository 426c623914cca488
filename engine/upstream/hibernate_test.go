package upstream_test

import (
	"testing"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/upstream"
)

// TestNeverHibernates: the upstream gateway keeps each generation's
// upstream session, which the saved state does not hold, so its sessions
// never hibernate (DESIGN.md, "Hibernation").
func TestNeverHibernates(t *testing.T) {
	e, err := upstream.New(upstream.Options{URL: "http://127.0.0.1:9/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := engine.HibernationOf(e); got != engine.HibernateNever {
		t.Fatalf("upstream engine hibernation = %v, want never (%v)", got, engine.HibernateNever)
	}
}
