package session

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestLedgerOpenOutOfOrder: streams that reach the ledger out of their
// stream order, as concurrent POSTs do (each appends its opening event,
// then records the stream), are all found (regression: open appended,
// find's binary search missed the streams out of place, and their 409
// said "its calls all finished" of calls still running).
func TestLedgerOpenOutOfOrder(t *testing.T) {
	id := func(n uint64) jsonrpc.ID {
		v, err := jsonrpc.MakeID(float64(n))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var g ledger
	for _, s := range []uint64{5, 3, 9, 4, 7} {
		g.open(s, RequestIDs{id(s)})
	}
	for _, s := range []uint64{3, 4, 5, 7, 9} {
		c := g.find(s)
		if c == nil || len(c.IDs) != 1 || c.IDs[0] != id(s) {
			t.Fatalf("find(%d) = %+v, want the stream with request %d", s, c, s)
		}
	}
	if g.find(6) != nil {
		t.Fatalf("find(6) found a stream never opened")
	}
}
