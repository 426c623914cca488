// forward_test.go tests fleet mode's forwarding between two replicas that
// share one store: to the owner, the loop guard, an owner gone and an owner
// unreachable.

package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
	"github.com/tidemark-mcp/tidemark/transport"
)

// directory is a fleet.Directory in a map; a missing entry is not an
// error of the directory, an entry "unavailable" is.
type directory struct {
	mu   sync.Mutex
	urls map[string]string
}

func (d *directory) set(id, url string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.urls[id] = url
}

func (d *directory) Lookup(_ context.Context, id string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	u, ok := d.urls[id]
	switch {
	case !ok:
		return "", fmt.Errorf("replica %q: not announced", id)
	case u == "unavailable":
		return "", fmt.Errorf("directory: %w", store.ErrUnavailable)
	}
	return u, nil
}

// pair is two replicas, a and b, on one store, with leases.
type pair struct {
	a, b *stack
	dir  *directory
	st   store.Store
}

// newPair starts a and b with lease; a renews every renewA (0: lease/3).
func newPair(t *testing.T, lease, renewA time.Duration) *pair {
	t.Helper()
	p := &pair{dir: &directory{urls: map[string]string{}}, st: memory.New(memory.Options{})}
	replica := func(id string, renew time.Duration) *stack {
		return newStack(t, nil, &tidemark.Options{
			Store:     p.st,
			Sessions:  session.Options{Owner: id, Lease: lease, RenewInterval: renew},
			Transport: transport.Options{Directory: p.dir},
		}, nil)
	}
	p.a, p.b = replica("a", renewA), replica("b", 0)
	p.dir.set("a", p.a.srv.URL)
	p.dir.set("b", p.b.srv.URL)
	return p
}

// deadURL returns the URL of a loopback port nobody listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	return u
}

// TestForwardToOwner: requests for a session sent to a replica that does
// not own it are forwarded to the owner: a POST's SSE answer and a resume
// stream through, the session stays at generation 1 with its owner.
func TestForwardToOwner(t *testing.T) {
	ctx := testContext(t)
	p := newPair(t, time.Minute, 0)
	s := p.a.initialize(t, ctx, "2025-11-25")
	onB := p.b.client.SessionFor(s.Token, s.ProtocolVersion)

	evs := countdown(t, ctx, onB, 2, 5, "fw")
	if c := parseCursor(t, evs[0].ID); c.Generation != 1 {
		t.Fatalf("forwarded countdown answered at generation %d, want 1", c.Generation)
	}
	st, err := onB.Resume(ctx, evs[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := st.Collect()
	st.Close()
	if err != nil || len(replayed) != 1+4 || replayed[4].ID != evs[6].ID {
		t.Fatalf("forwarded resume: %v, %d events, want priming + the 4 events after progress 2", err, len(replayed))
	}
	wantResumePriming(t, replayed[0], evs[2].ID, time.Second)
	rec, err := p.st.Get(ctx, s.Token)
	if err != nil || rec.Owner != "a" || rec.Generation != 1 {
		t.Fatalf("record: owner %q gen %d %v, want a gen 1", rec.Owner, rec.Generation, err)
	}
	if p.b.h.Registry().Len() != 0 {
		t.Fatalf("b holds %d sessions, want 0: it forwards", p.b.h.Registry().Len())
	}
	// DELETE needs no owner: b ends the session in the store.
	if err := onB.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = s.Resume(ctx, evs[2].ID)
	wantRefusal(t, err, http.StatusNotFound, replay.ReasonSessionNotFound.String())
}

// TestForwardLoopGuard: a forwarded request that reaches a replica that
// does not own the session either is refused with 503 owner_moved and
// Retry-After, not forwarded again.
func TestForwardLoopGuard(t *testing.T) {
	ctx := testContext(t)
	p := newPair(t, time.Minute, 0)
	s := p.a.initialize(t, ctx, "2025-11-25")
	c := p.b.clientWith(http.Header{fleet.ForwardedByHeader: {"c"}})
	resp, err := c.SessionFor(s.Token, s.ProtocolVersion).Post(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	se := refusalOf(t, resp, http.StatusServiceUnavailable, replay.ReasonOwnerMoved.String())
	if ra := se.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After = %q, want 1", ra)
	}
}

// TestForwardOwnerGone: when the owner cannot be reached (nothing listens
// at its URL), the request waits, acknowledging nothing, until the owner's
// lease lapses, then takes the session over and is served at generation 2.
func TestForwardOwnerGone(t *testing.T) {
	ctx := testContext(t)
	const lease = 600 * time.Millisecond
	p := newPair(t, lease, time.Hour) // a never renews: as if it died
	s := p.a.initialize(t, ctx, "2025-11-25")
	rec, err := p.st.Get(ctx, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	p.dir.set("a", deadURL(t)) // a died; its lease runs out
	onB := p.b.client.SessionFor(s.Token, s.ProtocolVersion)
	evs := countdown(t, ctx, onB, 2, 3, "gone")
	if done := time.Now(); done.Before(rec.LeaseUntil) || done.After(rec.LeaseUntil.Add(time.Second)) {
		t.Fatalf("served at %v, want after the lease expiry %v and within 1s of it", done, rec.LeaseUntil)
	}
	if c := parseCursor(t, evs[0].ID); c.Generation != 2 {
		t.Fatalf("served at generation %d, want 2", c.Generation)
	}
	if rec, err := p.st.Get(ctx, s.Token); err != nil || rec.Owner != "b" {
		t.Fatalf("record after the takeover: owner %q %v, want b", rec.Owner, err)
	}
}

// TestForwardOwnerUnreachable: an owner that keeps renewing its lease but
// cannot be reached gets 503 owner_unreachable, with Retry-After, about a
// second after the lease first seen; a directory that cannot be reached
// gets 503 unavailable at once.
func TestForwardOwnerUnreachable(t *testing.T) {
	ctx := testContext(t)
	const lease = 500 * time.Millisecond
	p := newPair(t, lease, 0)
	s := p.a.initialize(t, ctx, "2025-11-25")
	p.dir.set("a", deadURL(t))
	onB := p.b.client.SessionFor(s.Token, s.ProtocolVersion)
	start := time.Now()
	resp, err := onB.Post(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	se := refusalOf(t, resp, http.StatusServiceUnavailable, replay.ReasonOwnerUnreachable.String())
	if took := time.Since(start); took < time.Second || took > lease+2*time.Second {
		t.Fatalf("refused after %v, want between 1s and %v", took, lease+2*time.Second)
	}
	if ra := se.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After = %q, want 1", ra)
	}

	p.dir.set("a", "unavailable")
	_, err = onB.Resume(ctx, "x")
	if se, ok := mcptest.AsStatusError(err); !ok || se.Status != http.StatusServiceUnavailable || se.Reason() != replay.ReasonUnavailable.String() {
		t.Fatalf("with the directory unavailable: %v, want 503 unavailable", err)
	}
}

// TestForwardOwnerStalls: an owner that sends a forwarded stream's first
// event and then nothing at all (stopped with SIGSTOP, or cut off; a live
// owner writes a keep-alive comment at least every 1.5 KeepAlive) no
// longer holds the client: the forwarding replica ends the stream after
// twice its KeepAlive without a byte, and the client resumes.
func TestForwardOwnerStalls(t *testing.T) {
	ctx := testContext(t)
	dir := &directory{urls: map[string]string{}}
	st := memory.New(memory.Options{})
	a := newStack(t, nil, &tidemark.Options{Store: st, Sessions: session.Options{Owner: "a", Lease: time.Minute}, Transport: transport.Options{Directory: dir}}, nil)
	const keepAlive = 100 * time.Millisecond
	b := newStack(t, nil, &tidemark.Options{Store: st, Sessions: session.Options{Owner: "b", Lease: time.Minute}, Transport: transport.Options{Directory: dir, KeepAlive: keepAlive}}, nil)
	dir.set("b", b.srv.URL)
	s := a.initialize(t, ctx, "2025-11-25")
	release := make(chan struct{})
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "id: x-1-2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n")
		w.(http.Flusher).Flush()
		<-release // then nothing, as a stopped process
	}))
	defer stalled.Close()
	defer close(release)
	dir.set("a", stalled.URL)

	st2, err := b.client.SessionFor(s.Token, s.ProtocolVersion).Call(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	evs, _ := st2.Collect()
	if took := time.Since(start); len(evs) != 1 || evs[0].ID != "x-1-2" || took < 2*keepAlive || took > 2*time.Second {
		t.Fatalf("forwarded stream of a stalled owner: %d events %v, ended after %v; want its one event, then the end after about %v",
			len(evs), evs, took, 2*keepAlive)
	}
}

// frozenOwner returns a loopback listener that never accepts, as the
// listener of an owner stopped with SIGSTOP: its kernel completes the
// connections forwarded to it, and their requests wait in its socket
// buffer, unanswered.
func frozenOwner(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestForwardOwnerFrozen: a request forwarded to an owner that is stopped
// (its kernel takes the request, nothing answers, its lease is not
// renewed) is given up when the owner's lease lapses, and served at
// generation 2 within a second of the lapse, not after a fixed wait. The
// request that sat in the stopped owner's socket, read by the owner once
// it wakes, is refused 503 owner_moved: the owner checks its lease before
// it serves anything, and finds the session taken over.
func TestForwardOwnerFrozen(t *testing.T) {
	ctx := testContext(t)
	const lease = 600 * time.Millisecond
	p := newPair(t, lease, time.Hour) // a never renews: it is stopped
	s := p.a.initialize(t, ctx, "2025-11-25")
	rec, err := p.st.Get(ctx, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	frozen := frozenOwner(t)
	p.dir.set("a", "http://"+frozen.Addr().String()+"/mcp")
	onB := p.b.client.SessionFor(s.Token, s.ProtocolVersion)
	evs := countdown(t, ctx, onB, 2, 3, "frozen")
	if done := time.Now(); done.Before(rec.LeaseUntil) || done.After(rec.LeaseUntil.Add(time.Second)) {
		t.Fatalf("served at %v, want after the lease expiry %v and within 1s of it", done, rec.LeaseUntil)
	}
	if c := parseCursor(t, evs[0].ID); c.Generation != 2 {
		t.Fatalf("served at generation %d, want 2", c.Generation)
	}
	if rec, err := p.st.Get(ctx, s.Token); err != nil || rec.Owner != "b" || rec.Generation != 2 {
		t.Fatalf("record after the takeover: owner %q gen %d %v, want b gen 2", rec.Owner, rec.Generation, err)
	}

	// The owner wakes and reads what waited in its socket.
	conn, err := frozen.Accept()
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	forwarded, err := io.ReadAll(conn) // b gave it up: it ends
	conn.Close()
	if err != nil || !bytes.Contains(forwarded, []byte(`"frozen"`)) {
		t.Fatalf("the stopped owner's socket held %q (%v), want the forwarded call", forwarded, err)
	}
	toA, err := net.Dial("tcp", p.a.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer toA.Close()
	if _, err := toA.Write(forwarded); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(toA), nil)
	if err != nil {
		t.Fatal(err)
	}
	refusalOf(t, resp, http.StatusServiceUnavailable, replay.ReasonOwnerMoved.String())
	if rec, err := p.st.Get(ctx, s.Token); err != nil || rec.Owner != "b" || rec.Generation != 2 {
		t.Fatalf("record after the owner woke: owner %q gen %d %v, want b gen 2", rec.Owner, rec.Generation, err)
	}
}

// TestForwardOwnerSilent: an owner that keeps renewing its lease but
// sends nothing back for a request forwarded to it (its listener is stuck)
// holds the request for one lease TTL at most: then the request is refused
// 503 owner_unreachable, with Retry-After (the owner may have seen it:
// the client decides whether to send it again), and the session stays
// with its owner at generation 1.
func TestForwardOwnerSilent(t *testing.T) {
	ctx := testContext(t)
	const lease = 600 * time.Millisecond
	p := newPair(t, lease, 0)
	s := p.a.initialize(t, ctx, "2025-11-25")
	p.dir.set("a", "http://"+frozenOwner(t).Addr().String()+"/mcp")
	onB := p.b.client.SessionFor(s.Token, s.ProtocolVersion)
	start := time.Now()
	resp, err := onB.Post(ctx, mcptest.ToolCall(2, "echo", map[string]any{"text": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	se := refusalOf(t, resp, http.StatusServiceUnavailable, replay.ReasonOwnerUnreachable.String())
	if took := time.Since(start); took < lease || took > lease+time.Second {
		t.Fatalf("refused after %v, want after one lease TTL (%v) and within 1s of it", took, lease)
	}
	if ra := se.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After = %q, want 1", ra)
	}
	if rec, err := p.st.Get(ctx, s.Token); err != nil || rec.Owner != "a" || rec.Generation != 1 {
		t.Fatalf("record: owner %q gen %d %v, want a gen 1", rec.Owner, rec.Generation, err)
	}
}

// TestForwardConnectionNamedHeaders: a client that names the MCP headers
// in its Connection header gets the same answer from the replica that
// does not own the session as from the owner: the replica it connected to
// is its origin server, and the fields it reads reach the owner
// (regression: the reverse proxy removed them as hop-by-hop, so a resume
// naming Last-Event-ID opened a standalone stream at the owner instead of
// replaying, and one naming Mcp-Session-Id answered 400
// session_required).
func TestForwardConnectionNamedHeaders(t *testing.T) {
	ctx := testContext(t)
	p := newPair(t, time.Minute, 0)
	s := p.a.initialize(t, ctx, "2025-11-25")
	evs := countdown(t, ctx, s, 2, 5, "hop")
	from := evs[2].ID // progress 2
	for _, named := range []string{"Last-Event-ID", "Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Session-Id, Last-Event-ID, MCP-Protocol-Version"} {
		for _, r := range []struct {
			name string
			st   *stack
		}{{"owner a", p.a}, {"b", p.b}} {
			t.Run(named+" at "+r.name, func(t *testing.T) {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				on := r.st.client.SessionFor(s.Token, s.ProtocolVersion)
				req, err := on.NewRequest(rctx, http.MethodGet, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Last-Event-ID", from)
				req.Header.Set("Connection", "keep-alive, "+named)
				resp, err := on.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				st, err := mcptest.OpenStream(resp)
				if err != nil {
					t.Fatalf("resume: %v, want 200 and the replay", err)
				}
				got, err := st.Collect()
				st.Close()
				if err != nil || len(got) != 1+4 {
					t.Fatalf("resume: %v, %d events, want priming + the 4 events after progress 2", err, len(got))
				}
				wantResumePriming(t, got[0], from, time.Second)
				for i, e := range got[1:] {
					if e.ID != evs[3+i].ID || !bytes.Equal(e.Data, evs[3+i].Data) {
						t.Fatalf("replayed event %d: %s %s, want %s %s", i+1, e.ID, e.Data, evs[3+i].ID, evs[3+i].Data)
					}
				}

				// A POST naming the session's headers is answered too.
				body, err := mcptest.Encode(mcptest.ToolCall(int64(100+len(named)), "echo", map[string]any{"text": "hop"}, nil))
				if err != nil {
					t.Fatal(err)
				}
				req, err = on.NewRequest(rctx, http.MethodPost, body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Connection", "keep-alive, "+named)
				resp, err = on.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				msgs, err := mcptest.ReadAnswer(resp)
				if err != nil || len(msgs) != 1 {
					t.Fatalf("echo: %v, %v; want its answer", msgs, err)
				}
			})
		}
	}
	// An unsupported MCP-Protocol-Version named in Connection is refused
	// alike at both.
	for _, r := range []struct {
		name string
		st   *stack
	}{{"owner a", p.a}, {"b", p.b}} {
		on := r.st.client.SessionFor(s.Token, "1999-01-01")
		req, err := on.NewRequest(ctx, http.MethodGet, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Last-Event-ID", from)
		req.Header.Set("Connection", "keep-alive, MCP-Protocol-Version")
		resp, err := on.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		refusalOf(t, resp, http.StatusBadRequest, replay.ReasonProtocolVersion.String())
	}
	if rec, err := p.st.Get(ctx, s.Token); err != nil || rec.Owner != "a" || rec.Generation != 1 {
		t.Fatalf("record: owner %q gen %d %v, want a gen 1", rec.Owner, rec.Generation, err)
	}
}
