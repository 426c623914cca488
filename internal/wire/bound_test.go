package wire_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// TestHeaderBound: the bound fires once at its duration; a hold keeps it
// from firing for as long as it lasts, and its release starts the whole
// bound over; a stopped bound never fires; a context without a bound
// takes holds as no-ops.
func TestHeaderBound(t *testing.T) {
	const d = 50 * time.Millisecond
	fired := make(chan time.Time, 2)
	expire := func() { fired <- time.Now() }

	_, stop := wire.WithHeaderBound(context.Background(), d, expire)
	defer stop()
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("an unheld bound did not fire")
	}

	ctx, stop := wire.WithHeaderBound(context.Background(), d, expire)
	defer stop()
	release := wire.HoldHeaderBound(ctx)
	select {
	case <-fired:
		t.Fatal("a held bound fired")
	case <-time.After(4 * d):
	}
	released := time.Now()
	release()
	release() // a second release changes nothing
	select {
	case at := <-fired:
		if at.Sub(released) < d {
			t.Fatalf("the bound fired %v after its release, want the whole %v", at.Sub(released), d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a released bound did not fire")
	}

	ctx, stop = wire.WithHeaderBound(context.Background(), d, expire)
	stop()
	wire.HoldHeaderBound(ctx)()
	select {
	case <-fired:
		t.Fatal("a stopped bound fired")
	case <-time.After(4 * d):
	}
	wire.HoldHeaderBound(context.Background())()
}
