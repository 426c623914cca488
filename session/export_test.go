// export_test.go gives the tests of package session_test what the
// package does not export.

package session

import "github.com/tidemark-mcp/tidemark/engine"

// OutboxOf returns l as its engine session sees it, for tests that send as
// an engine does.
func OutboxOf(l *Live) engine.Outbox { return (*outbox)(l) }
