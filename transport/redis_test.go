// redis_test.go tests what a POST stream costs a real redis-server.

package transport_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/mcptest"
	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store/redis"
	"github.com/tidemark-mcp/tidemark/transport"
)

// slowReads is a loopback TCP proxy to a redis-server that holds Redis's
// reply to each command naming XRANGE (the store's reads of a session's
// events) for delay before it passes it on; everything else passes at
// once. A connection carries one command (or one pipeline) at a time, so
// the reply that follows such a command is its reply.
type slowReads struct {
	ln    net.Listener
	to    string
	delay time.Duration
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startSlowReads(t *testing.T, to string, delay time.Duration) *slowReads {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowReads{ln: ln, to: to, delay: delay}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *slowReads) url() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *slowReads) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		r, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, r)
		p.mu.Unlock()
		var reads atomic.Int64 // commands naming XRANGE not answered yet
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer r.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("xrange")) {
						reads.Add(1)
					}
					if _, err := r.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer p.wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					if reads.Load() > 0 {
						reads.Add(-1)
						time.Sleep(p.delay)
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *slowReads) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// connectionsReceived returns how many connections the redis-server at
// addr has accepted (INFO stats, total_connections_received), its own
// connection for this question included.
func connectionsReceived(t *testing.T, addr string) int {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`total_connections_received:(\d+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no total_connections_received in INFO stats:\n%s", info)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// serveOnSlowRedis serves eng through the transport with a Redis store
// whose reads of events reach it through slowReads (delay), on a loopback
// listener; everything ends with the test. It returns the client and the
// redis-server's address.
func serveOnSlowRedis(t *testing.T, eng engine.Engine, delay time.Duration) (*mcptest.Client, string) {
	t.Helper()
	testenv.NeedRedis(t)
	srv := redistest.Start(t, redistest.Options{})
	proxy := startSlowReads(t, srv.Addr(), delay)
	st, err := redis.New(testContext(t), redis.Options{URL: proxy.url()})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), eng, session.Options{Logger: quiet})
	h := transport.New(reg, transport.Options{Logger: quiet})
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		reg.Close()
		st.Close()
	})
	return &mcptest.Client{URL: hs.URL, HTTP: hs.Client()}, srv.Addr()
}

// TestSlowRedisReadKeepsConnections: a call whose stream reads its opening
// event from Redis in a reply that comes later than the stream's
// coalescing window (2 ms; the reply is held 20 ms) costs the server no
// new connection to Redis: the read is not cancelled at the window's end,
// which would close its connection, dial a new one and read again.
func TestSlowRedisReadKeepsConnections(t *testing.T) {
	ctx := testContext(t)
	c, addr := serveOnSlowRedis(t, answerEngine{}, 20*time.Millisecond)
	s, err := c.Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	call := func(id int64) {
		t.Helper()
		str, err := s.Call(ctx, mcptest.MustCall(id, "ping", nil))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := str.Collect()
		str.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || !evs[0].IsPriming() || !evs[1].IsResponseTo(mcptest.ID(id)) {
			t.Fatalf("call %d: events %v, want the priming event and the response", id, evs)
		}
	}
	// The first calls fill the store's pools of connections.
	const warm, calls = 5, 20
	for id := int64(2); id < 2+warm; id++ {
		call(id)
	}
	before := connectionsReceived(t, addr)
	for id := int64(2 + warm); id < 2+warm+calls; id++ {
		call(id)
	}
	// One connection is this question's own.
	if got := connectionsReceived(t, addr) - before - 1; got != 0 {
		t.Errorf("%d calls opened %d new connections to Redis, want 0", calls, got)
	}
}

// TestSlowRedisReadPrimesFirst: a slow call's stream whose opening event
// Redis returns after the coalescing window has passed writes its headers
// and priming event as soon as it has read it, not with the answer.
func TestSlowRedisReadPrimesFirst(t *testing.T) {
	ctx := testContext(t)
	gate := make(chan struct{})
	c, _ := serveOnSlowRedis(t, answerEngine{gate: gate}, 20*time.Millisecond)
	s, err := c.Initialize(ctx, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	str, err := s.Call(ctx, mcptest.MustCall(2, "ping", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer str.Close()
	if e := next(t, str); !e.IsPriming() {
		t.Fatalf("first event %v, want the priming event", e)
	}
	close(gate)
	evs, err := str.Collect()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || !evs[0].IsResponseTo(mcptest.ID(2)) {
		t.Fatalf("events after the priming event %v, want the response", evs)
	}
}
