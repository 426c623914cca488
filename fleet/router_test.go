// router_test.go tests the Router on its own: a lookup that reports a
// remote owner, an owner on a loopback HTTP server, and the owner's record
// as a function of the time.

package fleet_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// directory is a fleet.Directory of one replica, "a".
type directory string

func (d directory) Lookup(context.Context, string) (string, error) { return string(d), nil }

// routeTo routes one POST through a router of replica "b" whose lookup
// finds the session held by "a", an owner that renews its lease of ttl
// for as long as the test runs, at the URL owner; whole says the fleet
// answers calls as application/json. It returns what the client got and
// how long it took.
func routeTo(t *testing.T, owner string, ttl time.Duration, whole bool) (*httptest.ResponseRecorder, bool, error, time.Duration) {
	t.Helper()
	renewed := func() time.Time { return time.Now().Add(ttl) } // a renews all the time
	rt := fleet.NewRouter(fleet.Leases{Owner: "b", TTL: ttl}, fleet.RouterOptions{
		Directory: directory(owner), JSONResponse: whole,
		Records: func(context.Context, string) (store.Record, error) {
			return store.Record{Token: "tok", Owner: "a", Generation: 1, LeaseUntil: renewed()}, nil
		},
	})
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	lookup := func(context.Context) error {
		return &fleet.RemoteError{Token: "tok", Owner: "a", Generation: 1, LeaseUntil: renewed()}
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/mcp", strings.NewReader(`{}`))
	start := time.Now()
	forwarded, err := rt.Route(w, r, []byte(`{}`), lookup)
	return w, forwarded, err, time.Since(start)
}

// TestRouteWholeAnswer: an owner that holds its lease and answers a call
// as one application/json body after three lease TTLs (a long call) is
// waited for, and its answer reaches the client; the same owner, in a
// fleet that answers with SSE streams, whose first event comes at once,
// is given up after one lease TTL: 503 owner_unreachable, nothing written.
func TestRouteWholeAnswer(t *testing.T) {
	const ttl = 200 * time.Millisecond
	var calls atomic.Int64
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if got := r.Header.Get(fleet.ForwardedByHeader); got != "b" {
			t.Errorf("%s = %q, want b", fleet.ForwardedByHeader, got)
		}
		select {
		case <-time.After(3 * ttl):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	}))
	defer owner.Close()

	w, forwarded, err, took := routeTo(t, owner.URL, ttl, true)
	if err != nil || !forwarded || w.Body.String() != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("application/json: forwarded %v, error %v, body %q; want the owner's answer", forwarded, err, w.Body)
	}
	if took < 3*ttl {
		t.Fatalf("application/json: answered after %v, before the owner answered (%v)", took, 3*ttl)
	}

	w, forwarded, err, took = routeTo(t, owner.URL, ttl, false)
	var ref *fleet.Refusal
	if forwarded || !errors.As(err, &ref) || ref.Reason != replay.ReasonOwnerUnreachable || w.Body.Len() != 0 {
		t.Fatalf("SSE: forwarded %v, error %v, body %q; want 503 owner_unreachable and nothing written", forwarded, err, w.Body)
	}
	if took < ttl || took > ttl+time.Second {
		t.Fatalf("SSE: refused after %v, want after one lease TTL (%v) and within 1s of it", took, ttl)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the owner got %d requests, want 2: one each, never sent twice", n)
	}
}
