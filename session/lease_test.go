// lease_test.go holds the driver of the lease scripts (testdata/lease):
// replicas of a fleet, registries on one memory store with one clock,
// claim, renew, take over and drop sessions as the lease rules decide.

package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// TestLeaseScripts runs each file of testdata/lease in a world of its own.
// Commands (replicas and sessions are named by the script; times are
// offsets from the world's start, t0):
//
//	replica NAME [lease=DUR]   a registry owned by NAME (lease 0: none)
//	create R S                 R creates session S
//	get R S                    R looks S up for a request (Registry.Get)
//	record S                   the store's record of S
//	held R                     how many sessions R holds (Registry.Len)
//	advance DUR                the clock moves on
//	renew R                    R renews its leases (Registry.RenewLeases)
//	end R S                    R ends S (DELETE)
//	close R                    R closes (Registry.Close)
//	open R S gen=G             a call opens a stream on R's generation G of S
//	send R S gen=G             the engine of R's generation G of S emits a message
//	deliver R S gen=G          a client's notification is handed to R's generation G of S
//	ended R S gen=G            whether R's generation G of S has ended (waits)
//	store fail|ok              the store's appends fail as unavailable, or not
//	store down|up              the store answers nothing (reads, renewals and
//	                           appends fail as unavailable), or answers again
//	race C S [lease=DUR]       at the next claim of S, C claims it first
//
// Each command's output ends with the log lines the replicas wrote
// meanwhile, at INFO and above, without the session and error fields.
func TestLeaseScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/lease", func(t *testing.T, path string) {
		w := newLeaseWorld(t)
		datadriven.RunTest(t, path, w.run)
	})
}

// leaseWorld is the state of one lease script.
type leaseWorld struct {
	t      *testing.T
	st     *flaky
	clk    *testenv.Clock
	t0     time.Time
	log    *scriptLog
	regs   map[string]*session.Registry
	tokens map[string]string        // session name → token
	lives  map[string]*session.Live // "replica/session/generation" → what that replica got
}

func newLeaseWorld(t *testing.T) *leaseWorld {
	rs := newReplicas()
	return &leaseWorld{
		t: t, st: rs.st, clk: rs.clk, t0: rs.clk.Now(), log: &scriptLog{},
		regs: map[string]*session.Registry{}, tokens: map[string]string{}, lives: map[string]*session.Live{},
	}
}

func (w *leaseWorld) run(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	var out string
	switch d.Cmd {
	case "replica":
		w.replica(t, d)
	case "create":
		l, err := w.reg(t, d, 0).Create(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		w.tokens[w.arg(t, d, 1)] = l.Token()
		out = w.got(d, l, nil)
	case "get":
		l, err := w.reg(t, d, 0).Get(ctx, w.token(t, d), "")
		out = w.got(d, l, err)
	case "record":
		out = w.record(t, d)
	case "held":
		out = fmt.Sprintf("%s holds %d", w.arg(t, d, 0), w.reg(t, d, 0).Len())
	case "advance":
		dur, err := time.ParseDuration(w.arg(t, d, 0))
		if err != nil {
			t.Fatal(err)
		}
		w.clk.Advance(dur)
		out = "now " + w.at(w.clk.Now())
	case "renew":
		w.reg(t, d, 0).RenewLeases(ctx)
	case "end":
		out = w.describe(w.reg(t, d, 0).End(ctx, w.token(t, d), store.EndDeleted))
	case "close":
		w.reg(t, d, 0).Close()
	case "open":
		_, err := w.live(t, d).OpenStream(ctx, []*jsonrpc.Request{request(t, 5, "ping", nil)}, false, 0)
		out = w.describe(err)
	case "send":
		out = w.describe(session.OutboxOf(w.live(t, d)).Send(ctx, &jsonrpc.Request{Method: "notifications/message"}, jsonrpc.ID{}))
	case "deliver":
		n := &jsonrpc.Request{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":99}`)}
		out = w.describe(w.live(t, d).Deliver(ctx, n, engine.Request{}))
	case "ended":
		out = w.ended(t, d)
	case "store":
		switch w.arg(t, d, 0) {
		case "fail", "ok":
			w.st.failing.Store(w.arg(t, d, 0) == "fail")
		case "down", "up":
			w.st.down.Store(w.arg(t, d, 0) == "down")
		default:
			t.Fatalf("store %q: want fail, ok, down or up", w.arg(t, d, 0))
		}
	case "race":
		w.race(t, d)
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	return w.output(out)
}

// replica starts a registry: replica NAME [lease=DUR].
func (w *leaseWorld) replica(t *testing.T, d *datadriven.TestData) {
	name := w.arg(t, d, 0)
	lease := time.Duration(0)
	if d.HasArg("lease") {
		var s string
		d.ScanArgs(t, "lease", &s)
		var err error
		if lease, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(&scriptHandler{log: w.log, replica: name})
	reg := session.New(w.st, eventlog.New(w.st, eventlog.Options{Now: w.clk.Now, Budget: -1}), gosdk.New(demo.NewServer()),
		session.Options{Owner: name, Lease: lease, Now: w.clk.Now, Logger: log})
	t.Cleanup(func() { reg.Close() })
	w.regs[name] = reg
}

// race makes C claim S first at the next claim: race C S [lease=DUR].
func (w *leaseWorld) race(t *testing.T, d *datadriven.TestData) {
	owner, lease := w.arg(t, d, 0), 10*time.Second
	if d.HasArg("lease") {
		var s string
		d.ScanArgs(t, "lease", &s)
		lease, _ = time.ParseDuration(s)
	}
	until := w.clk.Now().Add(lease)
	race := func(token string, from uint64) {
		if _, err := w.st.Store.Claim(context.Background(), token, owner, from, until); err != nil {
			t.Errorf("%s's claim: %v", owner, err)
		}
	}
	w.st.race.Store(&race)
}

// got describes what a replica got for a session: a generation of it, or
// the error.
func (w *leaseWorld) got(d *datadriven.TestData, l *session.Live, err error) string {
	replica := d.CmdArgs[0].Key
	if err != nil {
		return replica + ": " + w.describe(err)
	}
	name := d.CmdArgs[1].Key
	key := fmt.Sprintf("%s/%s/%d", replica, name, l.Generation())
	out := fmt.Sprintf("%s: %s generation %d", replica, name, l.Generation())
	if prev, ok := w.lives[key]; ok && prev != l {
		out += " (another Live than before)"
	}
	w.lives[key] = l
	return out
}

// describe renders err without the session token: "ok" when nil.
func (w *leaseWorld) describe(err error) string {
	var remote *fleet.RemoteError
	var fenced *store.FencedError
	var ended *store.EndedError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &remote):
		return fmt.Sprintf("remote: owner %s, generation %d, lease until %s", remote.Owner, remote.Generation, w.at(remote.LeaseUntil))
	case errors.As(err, &fenced):
		return fmt.Sprintf("fenced: %s of generation %d, the record is at generation %d", fenced.Op, fenced.Have, fenced.Want)
	case errors.As(err, &ended):
		return "ended: " + string(ended.Reason)
	case errors.Is(err, store.ErrUnavailable):
		return "store unavailable"
	}
	return "error: " + err.Error()
}

func (w *leaseWorld) record(t *testing.T, d *datadriven.TestData) string {
	rec, err := w.st.Get(context.Background(), w.tokens[w.arg(t, d, 0)])
	if err != nil {
		return w.describe(err)
	}
	lease := "no lease"
	if !rec.LeaseUntil.IsZero() {
		lease = "lease until " + w.at(rec.LeaseUntil)
	}
	return fmt.Sprintf("owner %s, generation %d, %s", rec.Owner, rec.Generation, lease)
}

// ended waits up to 5 s for the generation named by ended R S gen=G to end.
func (w *leaseWorld) ended(t *testing.T, d *datadriven.TestData) string {
	select {
	case <-w.live(t, d).Done():
		return "ended"
	case <-time.After(5 * time.Second):
		return "live"
	}
}

// live returns the Live named by R S gen=G.
func (w *leaseWorld) live(t *testing.T, d *datadriven.TestData) *session.Live {
	var gen uint64
	d.ScanArgs(t, "gen", &gen)
	l := w.lives[fmt.Sprintf("%s/%s/%d", w.arg(t, d, 0), w.arg(t, d, 1), gen)]
	if l == nil {
		t.Fatalf("%s never got generation %d of %s", w.arg(t, d, 0), gen, w.arg(t, d, 1))
	}
	return l
}

func (w *leaseWorld) reg(t *testing.T, d *datadriven.TestData, i int) *session.Registry {
	reg := w.regs[w.arg(t, d, i)]
	if reg == nil {
		t.Fatalf("no replica %q", w.arg(t, d, i))
	}
	return reg
}

func (w *leaseWorld) token(t *testing.T, d *datadriven.TestData) string {
	tok, ok := w.tokens[w.arg(t, d, 1)]
	if !ok {
		t.Fatalf("no session %q", w.arg(t, d, 1))
	}
	return tok
}

// arg returns the i-th positional argument.
func (w *leaseWorld) arg(t *testing.T, d *datadriven.TestData, i int) string {
	if i >= len(d.CmdArgs) || len(d.CmdArgs[i].Vals) > 0 {
		t.Fatalf("%s: argument %d missing", d.Cmd, i+1)
	}
	return d.CmdArgs[i].Key
}

// at renders a time as its offset from t0.
func (w *leaseWorld) at(tm time.Time) string { return "+" + tm.Sub(w.t0).String() }

// output is out followed by the log lines written since the last command.
func (w *leaseWorld) output(out string) string {
	lines := w.log.take()
	if out != "" {
		lines = append([]string{out}, lines...)
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// scriptLog collects the log lines of a lease script.
type scriptLog struct {
	mu    sync.Mutex
	lines []string
}

func (sl *scriptLog) add(line string) {
	sl.mu.Lock()
	sl.lines = append(sl.lines, line)
	sl.mu.Unlock()
}

func (sl *scriptLog) take() []string {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	lines := sl.lines
	sl.lines = nil
	return lines
}

// scriptHandler writes "log REPLICA: LEVEL message key=value ..." lines,
// without the session (a random token's prefix) and error fields.
type scriptHandler struct {
	log     *scriptLog
	replica string
	attrs   []slog.Attr
}

func (h *scriptHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *scriptHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "log %s: %s %s", h.replica, r.Level, r.Message)
	add := func(a slog.Attr) bool {
		if a.Key != "session" && a.Key != "error" {
			fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.log.add(b.String())
	return nil
}

func (h *scriptHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &scriptHandler{log: h.log, replica: h.replica, attrs: append(slices.Clone(h.attrs), attrs...)}
}

func (h *scriptHandler) WithGroup(string) slog.Handler { return h }

// TestLeaseRunRenews: Run renews leases every RenewInterval (real time):
// after two lease lengths the lease has not lapsed, where without a
// renewal it would have 300 ms ago. How much is left depends on the
// machine's load (134 ms at a load of 23 on 2 cores), so the test asks
// only that some is.
func TestLeaseRunRenews(t *testing.T) {
	st := memory.New(memory.Options{})
	reg := session.New(st, eventlog.New(st, eventlog.Options{}), gosdk.New(demo.NewServer()),
		session.Options{Owner: "a", Lease: 300 * time.Millisecond, RenewInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer reg.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); reg.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	l, err := reg.Create(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // twice the lease
	rec, err := st.Get(context.Background(), l.Token())
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(rec.LeaseUntil); left <= 0 {
		t.Fatalf("lease lapsed %v ago after two lease lengths of Run, want renewals every 50ms to keep it", -left)
	}
}
