package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// TestAbandonedSessionExpires: a session whose owner went away after
// its last write (no sweep of any replica indexes it) leaves Redis by
// itself: every key of it has an expiry, none goes before the idle TTL,
// the record goes first (a read then finds no record, never a record
// without its log), and afterwards the token is unknown to another
// Store, with no key of it left.
func TestAbandonedSessionExpires(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	const idle, margin = 2 * time.Second, 100 * time.Millisecond
	keep := idle + idle/4 + margin // expiry.go
	owner := open(t, srv, redis.Options{IdleTTL: idle, IdleMargin: margin})
	create(t, owner, "tok")
	// A claim makes the wake stream; an opening event the open set.
	if _, err := owner.Claim(ctx, "tok", "p1", 1, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	opening := store.Event{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(`[7]`), Time: epoch}
	if _, err := owner.Append(ctx, "tok", 2, []store.Event{opening, msgs("a")[0]}); err != nil {
		t.Fatal(err)
	}
	if err := owner.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	if err := owner.Touch(ctx, "tok", time.Now()); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	owner.Close() // the owner is gone: nothing writes the session again

	c := client(t, srv)
	keys := []string{"tidemark:{tok}:rec", "tidemark:{tok}:log", "tidemark:{tok}:wake", "tidemark:{tok}:open"}
	for i, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		upper := keep + keep/8
		if i > 0 {
			upper += time.Second
		}
		if err != nil || ttl < keep-time.Since(last) || ttl > upper {
			t.Fatalf("PTTL %s = %v, %v; want in [%v, %v]", k, ttl, err, keep-time.Since(last), upper)
		}
	}
	if n := c.Exists(ctx, "tidemark:{tok}:end").Val(); n != 0 {
		t.Fatalf("tombstone of a live session exists (%d)", n)
	}

	time.Sleep(time.Until(last.Add(idle)))
	if n := c.Exists(ctx, keys...).Val(); n != int64(len(keys)) {
		t.Fatalf("%d of the session's %d keys exist at its idle TTL, want all", n, len(keys))
	}
	other := open(t, srv, redis.Options{IdleTTL: idle, IdleMargin: margin})
	for c.Exists(ctx, keys[0]).Val() == 1 {
		if time.Since(last) > keep+keep/8+time.Second {
			t.Fatalf("record still in Redis %v after the last write, want gone after %v", time.Since(last), keep+keep/8)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := other.Read(ctx, "tok", 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Read as the record expires = %v, want ErrNotFound", err)
	}
	if n := c.Exists(ctx, keys[1]).Val(); n != 1 {
		t.Fatalf("log gone with the record (%d); want it to outlive the record by its tail", n)
	}
	for c.Exists(ctx, keys...).Val() > 0 {
		if time.Since(last) > keep+keep/8+3*time.Second {
			t.Fatalf("keys %v still in Redis %v after the last write", keys, time.Since(last))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := c.Keys(ctx, "*").Result(); err != nil || len(got) != 0 {
		t.Fatalf("keys left in Redis: %q, %v; want none", got, err)
	}
	if _, err := other.Get(ctx, "tok"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after expiry = %v, want ErrNotFound", err)
	}
}

// TestHibernatedSessionKeepsItsIdleTTL: a session hibernated (no owner,
// nothing writes it) keeps every key for at least its idle TTL after the
// hibernation, which counts as a write.
func TestHibernatedSessionKeepsItsIdleTTL(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	const idle = time.Hour
	s := open(t, srv, redis.Options{IdleTTL: idle})
	create(t, s, "tok")
	if _, err := s.Append(ctx, "tok", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	c := client(t, srv)
	// As a session hibernated after most of its keep: the record's
	// expiry is short when Hibernate runs.
	c.PExpire(ctx, "tidemark:{tok}:rec", time.Minute)
	if err := s.Hibernate(ctx, "tok", "p1", 1, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tidemark:{tok}:rec", "tidemark:{tok}:log"} {
		if ttl := c.PTTL(ctx, k).Val(); ttl < idle+idle/4+redis.DefaultIdleMargin-time.Minute {
			t.Fatalf("PTTL %s after Hibernate = %v, want at least the idle TTL and its margins", k, ttl)
		}
	}
}

// TestNoExpiry: a negative IdleTTL leaves a session's keys without one.
func TestNoExpiry(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{IdleTTL: -1})
	create(t, s, "tok")
	if _, err := s.Append(ctx, "tok", 1, msgs("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, "tok"); err != nil {
		t.Fatal(err)
	}
	c := client(t, srv)
	for _, k := range []string{"tidemark:{tok}:rec", "tidemark:{tok}:log"} {
		if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl != -1 {
			t.Fatalf("PTTL %s = %v, %v; want -1 (no expiry)", k, ttl, err)
		}
	}
}

// TestCreatedKeysGetTheirExpiry: every script that can create a key of a
// session gives it an expiry that outlives the record's by about the
// tail, whether the record's deadline is far (the new key gets the
// record's) or near (every key's is pushed): the wake stream a trim
// makes, the log an append makes after a claim emptied it, the open set
// an append makes and the one it makes again after an end emptied it.
func TestCreatedKeysGetTheirExpiry(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	const idle = time.Hour
	keep := idle + idle/4 + redis.DefaultIdleMargin // expiry.go
	s := open(t, srv, redis.Options{IdleTTL: idle})
	c := client(t, srv)
	rec := "tidemark:{tok}:rec"
	others := []string{"tidemark:{tok}:log", "tidemark:{tok}:wake", "tidemark:{tok}:open"}
	// check: every key that exists has an expiry, the record's at least
	// keep, and every other key's a second (the tail) later than the
	// record's, within a few milliseconds.
	check := func(step string, want int) {
		t.Helper()
		r := c.PTTL(ctx, rec).Val()
		if r < keep-time.Second || r > keep+keep/8 {
			t.Fatalf("%s: PTTL %s = %v, want in [%v, %v]", step, rec, r, keep-time.Second, keep+keep/8)
		}
		n := 0
		for _, k := range others {
			ttl := c.PTTL(ctx, k).Val()
			if ttl == -2 { // go-redis: the key does not exist
				continue
			}
			n++
			if d := ttl - r; d < time.Second-10*time.Millisecond || d > time.Second+10*time.Millisecond {
				t.Fatalf("%s: PTTL %s = %v, %s's %v: want the record's plus 1s", step, k, ttl, rec, r)
			}
		}
		if n != want {
			t.Fatalf("%s: %d keys besides the record, want %d", step, n, want)
		}
	}
	opening := func() store.Event {
		return store.Event{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(`[1]`), Time: epoch}
	}
	ending := func(stream uint64) store.Event {
		return store.Event{Stream: stream, Kind: store.KindMessage, End: true, Data: []byte(`{}`), Time: epoch}
	}
	// near makes the record's deadline near, as for a session idle for
	// most of its keep, so that the next write pushes every key's.
	near := func() {
		c.PExpire(ctx, rec, time.Minute)
		for _, k := range others {
			c.PExpire(ctx, k, time.Minute+time.Second)
		}
	}
	create(t, s, "tok")
	check("create", 0)
	for _, far := range []bool{true, false} {
		name := map[bool]string{true: "far", false: "near"}[far]
		if far {
			c.PExpire(ctx, rec, keep+keep/16)
		} else {
			near()
		}
		b, err := appendSync(ctx, s, "tok", 1, msgs("a"))
		if err != nil {
			t.Fatal(err)
		}
		check(name+": log", 1)
		if !far {
			near()
		}
		if _, err := s.Trim(ctx, "tok", 1, b.HWM+1); err != nil {
			t.Fatal(err)
		}
		check(name+": wake stream", 2)
		if !far {
			near()
		}
		b, err = appendSync(ctx, s, "tok", 1, []store.Event{opening()})
		if err != nil {
			t.Fatal(err)
		}
		check(name+": open set", 3)
		if _, err := appendSync(ctx, s, "tok", 1, []store.Event{ending(b.HWM)}); err != nil {
			t.Fatal(err)
		}
		check(name+": open set emptied", 2)
		if !far {
			near()
		}
		if b, err = appendSync(ctx, s, "tok", 1, []store.Event{opening()}); err != nil {
			t.Fatal(err)
		}
		check(name+": open set made again", 3)
		// An append that opens and ends a stream leaves no open set.
		b, err = appendSync(ctx, s, "tok", 1, []store.Event{ending(b.HWM)})
		if err != nil {
			t.Fatal(err)
		}
		if !far {
			near()
		}
		if _, err := appendSync(ctx, s, "tok", 1, []store.Event{opening(), ending(b.HWM + 1)}); err != nil {
			t.Fatal(err)
		}
		check(name+": stream opened and ended", 2)
		// A claim empties the log and the open set; the next append
		// makes the log again.
		rec, err := s.Claim(ctx, "tok", "p2", 1, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		check(name+": claim", 1)
		if !far {
			near()
		}
		if _, err := appendSync(ctx, s, "tok", rec.Generation, msgs("b")); err != nil {
			t.Fatal(err)
		}
		check(name+": log after a claim", 2)
		if err := s.End(ctx, "tok", store.EndDeleted, time.Time{}); err != nil {
			t.Fatal(err)
		}
		create(t, s, "tok")
	}
}

// TestAppendReadsOnePTTL: an append to a session whose keys' deadline is
// far reads one PTTL and sets no expiry, whether or not it opens a
// stream while another is open.
func TestAppendReadsOnePTTL(t *testing.T) {
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := open(t, srv, redis.Options{})
	c := client(t, srv)
	create(t, s, "tok")
	opening := store.Event{Stream: store.NewStream, Kind: store.KindPriming, Data: []byte(`[1]`), Time: epoch}
	if _, err := appendSync(ctx, s, "tok", 1, []store.Event{opening}); err != nil {
		t.Fatal(err)
	}
	c.ConfigResetStat(ctx)
	const n = 10
	for i := range n {
		evs := msgs("a")
		if i%2 == 1 {
			evs = []store.Event{opening}
		}
		if _, err := appendSync(ctx, s, "tok", 1, evs); err != nil {
			t.Fatal(err)
		}
	}
	calls := func(cmd string) int {
		for line := range strings.Lines(c.Info(ctx, "commandstats").Val()) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				x, _ := strconv.Atoi(v[:strings.IndexByte(v, ',')])
				return x
			}
		}
		return 0
	}
	if got := calls("pttl"); got != n {
		t.Errorf("%d appends read %d PTTLs, want %d", n, got, n)
	}
	if got := calls("pexpire"); got != 0 {
		t.Errorf("%d appends set %d expiries, want none", n, got)
	}
}

// appendSync appends evs and waits until Redis holds them (Store.Sync):
// a pipelined Append may return before its events are written.
func appendSync(ctx context.Context, s *redis.Store, token string, gen uint64, evs []store.Event) (store.Bounds, error) {
	b, err := s.Append(ctx, token, gen, evs)
	if err != nil {
		return b, err
	}
	return b, s.Sync(ctx, token)
}
