package redis

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
)

// TestHibernateForgetsPipelineState: Hibernate leaves nothing of the
// session in the append pipeline of this process (a hibernated session
// keeps no memory here), and after Wake the next append learns the
// high-water mark from Redis: its sequence follows the stored events.
func TestHibernateForgetsPipelineState(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s, err := New(ctx, Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	if err := s.Create(ctx, store.Record{Token: "tok-p", Generation: 1, Owner: "p1", Created: now, LastSeen: now}); err != nil {
		t.Fatal(err)
	}
	evs := []store.Event{{Stream: 1, Kind: store.KindMessage, Data: []byte(`{"a":1}`), Time: now}, {Stream: 1, Kind: store.KindMessage, Data: []byte(`{"a":2}`), Time: now}}
	if _, err := s.Append(ctx, "tok-p", 1, evs); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok-p"); err != nil {
		t.Fatal(err)
	}
	if s.pl.get("tok-p", false) == nil {
		t.Fatal("no pipeline state after an append, want one (the test checks nothing)")
	}
	if err := s.Hibernate(ctx, "tok-p", "p1", 1, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if ps := s.pl.get("tok-p", false); ps != nil {
		t.Fatalf("pipeline state after Hibernate: %+v, want none", ps)
	}
	if _, err := s.Wake(ctx, "tok-p", "p2", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	more := []store.Event{{Stream: 1, Kind: store.KindMessage, Data: []byte(`{"a":3}`), Time: now}}
	if _, err := s.Append(ctx, "tok-p", 1, more); err != nil || more[0].Seq != 3 {
		t.Fatalf("append after the wake: seq %d, %v; want 3", more[0].Seq, err)
	}
	if err := s.Sync(ctx, "tok-p"); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Read(ctx, "tok-p", 0, 10)
	if err != nil || len(got) != 3 || string(got[2].Data) != `{"a":3}` {
		t.Fatalf("Read after the wake = %+v, %v; want 3 events, the last {\"a\":3}", got, err)
	}
}
