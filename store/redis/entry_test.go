package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestEntryFields: a message that does not end its stream is stored as a
// log entry of five fields (gen, stream, time, data, cum), without kind,
// end and retry, whose zero values a reader supplies; a priming event
// (kind 1, a retry) and a message that ends its stream keep all eight.
// Read returns each event as it was appended.
func TestEntryFields(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	s := open(t, srv, redis.Options{})
	create(t, s, "tok")
	at := epoch.Add(time.Minute)
	in := []store.Event{
		{Stream: store.NewStream, Kind: store.KindPriming, Retry: 1500 * time.Millisecond, Time: at},
		{Stream: 0, Kind: store.KindMessage, Data: []byte(`{"progress":1}`), Time: at},
		{Stream: 7, Kind: store.KindMessage, End: true, Data: []byte(`{"result":{}}`), Time: at},
	}
	for i := range in {
		if _, err := s.Append(ctx, "tok", 1, in[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	entries, err := c.XRange(ctx, redis.DefaultPrefix+"{tok}:log", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []int{8, 5, 8}
	if len(entries) != len(want) {
		t.Fatalf("log holds %d entries, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		if len(e.Values) != want[i] {
			t.Errorf("entry %s has %d fields %v, want %d", e.ID, len(e.Values), e.Values, want[i])
		}
	}
	got, _, err := s.Read(ctx, "tok", 0, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("Read = %d events, %v; want 3", len(got), err)
	}
	wantStream := []uint64{1, 0, 7}
	for i, e := range got {
		w := in[i]
		if e.Seq != uint64(i+1) || e.Generation != 1 || e.Stream != wantStream[i] || e.Kind != w.Kind || e.End != w.End ||
			e.Retry != w.Retry || !e.Time.Equal(w.Time) || string(e.Data) != string(w.Data) {
			t.Errorf("event %d read as %+v, want seq %d gen 1 stream %d kind %d end %v retry %v time %v data %q",
				i+1, e, i+1, wantStream[i], w.Kind, w.End, w.Retry, w.Time, w.Data)
		}
	}
}
