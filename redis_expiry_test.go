package tidemark_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestRedisAbandonedSessionExpires: a session hibernated on a replica
// that then went away is indexed by no other replica's sweep; Redis
// drops its keys by itself once it has been idle past the idle TTL
// (and the store's margins), and a later request for its token, on
// another replica, answers 404 session_not_found.
func TestRedisAbandonedSessionExpires(t *testing.T) {
	testenv.NeedRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.Start(t, redistest.Options{})
	const idle, margin = 2 * time.Second, 100 * time.Millisecond
	keep := idle + idle/4 + margin // store/redis/expiry.go
	replica := func(id string) (*tidemark.Handler, *mcptest.Client, func()) {
		st, err := redis.New(ctx, redis.Options{URL: srv.URL(), IdleTTL: idle, IdleMargin: margin})
		if err != nil {
			t.Fatal(err)
		}
		h := tidemark.NewHandler(demo.NewServer(), &tidemark.Options{
			Store:      st,
			Restorable: true,
			Sessions: session.Options{Owner: id, Lease: time.Second, IdleTTL: idle,
				HibernateAfter: 200 * time.Millisecond, HandOver: true},
			SweepInterval: 20 * time.Millisecond,
		})
		hs := httptest.NewServer(h)
		hc := &http.Client{}
		stop := func() {
			hc.CloseIdleConnections()
			hs.Close()
			h.Close()
		}
		return h, &mcptest.Client{URL: hs.URL, HTTP: hc}, stop
	}
	ha, ca, stopA := replica("a")
	s, cursor, _ := callHoldingCursor(t, ctx, ca)
	awaitHibernated(t, ha, 1)
	last := time.Now()
	stopA() // replica a goes away; its index of hibernated sessions with it
	_, cb, stopB := replica("b")
	defer stopB()

	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	prefix := "tidemark:{" + s.Token + "}:"
	keys := []string{prefix + "rec", prefix + "log", prefix + "wake", prefix + "end", prefix + "open"}
	exist := func() []string {
		var out []string
		for _, k := range keys {
			if rdb.Exists(ctx, k).Val() == 1 {
				out = append(out, k)
			}
		}
		return out
	}
	if got := exist(); len(got) != 2 || got[0] != keys[0] || got[1] != keys[1] {
		t.Fatalf("keys of the hibernated session: %q, want its record and log", got)
	}
	time.Sleep(time.Until(last.Add(idle)))
	if got := exist(); len(got) != 2 {
		t.Fatalf("keys at the idle TTL: %q, want the record and the log still there", got)
	}
	for deadline := last.Add(keep + keep/8 + 2*time.Second); len(exist()) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("keys %q still in Redis %v after the session's last write, want none after %v",
				exist(), time.Since(last).Round(time.Millisecond), keep+keep/8+time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if all, err := rdb.Keys(ctx, "*").Result(); err != nil || len(all) != 0 {
		t.Fatalf("Redis holds %q, %v; want no key", all, err)
	}

	b := cb.SessionFor(s.Token, s.ProtocolVersion)
	_, err := b.Resume(ctx, cursor)
	if se, ok := mcptest.AsStatusError(err); !ok || se.Status != http.StatusNotFound || se.Reason() != string(replay.ReasonSessionNotFound) {
		t.Fatalf("resume of the expired session's stream = %v, want 404 session_not_found", err)
	}
	_, err = b.Call(ctx, mcptest.ToolCall(3, "echo", map[string]any{"text": "after"}, nil))
	if se, ok := mcptest.AsStatusError(err); !ok || se.Status != http.StatusNotFound || se.Reason() != string(replay.ReasonSessionNotFound) {
		t.Fatalf("call in the expired session = %v, want 404 session_not_found", err)
	}
}
