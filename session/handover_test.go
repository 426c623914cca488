// handover_test.go holds the tests of the handover of a graceful
// shutdown (Registry.HandOver).

package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/session"
)

// TestHandOver: with idle hibernation off (HibernateAfter negative),
// HandOver hibernates at once every initialized session with nothing
// busy, used a moment ago or not: its record keeps generation 1 with no
// owner, and the next Get wakes it at generation 1. A session with a call
// in flight, an attached connection or a request being served, and one
// never initialized, stay live for Close. Each session handed over logs
// "session hibernated" at Debug, none at Info: its caller logs the sum.
func TestHandOver(t *testing.T) {
	ctx := context.Background()
	f, logs := hibernating(t, true, session.Options{HibernateAfter: -1, HandOver: true})
	var idle []*session.Live
	for range 3 {
		l := mustCreate(t, f.reg)
		initialize(t, f, l)
		waitFor(t, func() bool { return session.Idle(l) })
		idle = append(idle, l)
	}
	defer busySessions(t, f)()

	handed, left := f.reg.HandOver(ctx)
	if handed != 3 || left != 4 || f.reg.Len() != 4 || f.reg.Hibernated() != 3 {
		t.Fatalf("HandOver = %d handed over, %d left; registry %d live, %d hibernated; want 3, 4, 4, 3", handed, left, f.reg.Len(), f.reg.Hibernated())
	}
	if n := strings.Count(logs.String(), `level=DEBUG msg="session hibernated"`); n != 3 {
		t.Fatalf("%d session hibernated lines at Debug, want 3:\n%s", n, logs)
	}
	wantLog(t, logs, `level=DEBUG msg="session hibernated".*exact=true`)
	if strings.Contains(logs.String(), `level=INFO msg="session hibernated"`) {
		t.Fatalf("a session hibernated line at Info, want none:\n%s", logs)
	}
	for _, l := range idle {
		rec, err := f.st.Get(ctx, l.Token())
		if err != nil || rec.Generation != 1 || rec.Owner != "" {
			t.Fatalf("record after the handover = %+v, %v; want generation 1, no owner", rec, err)
		}
		woken, err := f.reg.Get(ctx, l.Token(), "")
		if err != nil || woken == l || woken.Generation() != 1 {
			t.Fatalf("Get after the handover: %v, %v; want a new Live at generation 1", woken, err)
		}
	}
}

// TestHandOverNeedsExactEngineAndLastingStore: HandOver hibernates nothing
// when the store does not outlive the process (Options.HandOver false,
// however hibernation is set) or the engine does not restore its state
// exactly: every session is left for Close.
func TestHandOverNeedsExactEngineAndLastingStore(t *testing.T) {
	for _, tc := range []struct {
		name       string
		restorable bool
		opts       session.Options
	}{
		{"no lasting store", true, session.Options{HibernateAfter: time.Minute}},
		{"lossy engine", false, session.Options{HibernateAfter: time.Minute, HandOver: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f, _ := hibernating(t, tc.restorable, tc.opts)
			l := mustCreate(t, f.reg)
			initialize(t, f, l)
			waitFor(t, func() bool { return session.Idle(l) })
			if handed, left := f.reg.HandOver(ctx); handed != 0 || left != 1 || f.reg.Hibernated() != 0 {
				t.Fatalf("HandOver = %d handed over, %d left, %d hibernated; want 0, 1, 0", handed, left, f.reg.Hibernated())
			}
		})
	}
}

// TestHandOverStopsAtDeadline: a ctx already done hands nothing over and
// leaves the session live, as it was, for Close.
func TestHandOverStopsAtDeadline(t *testing.T) {
	f, _ := hibernating(t, true, session.Options{HibernateAfter: -1, HandOver: true})
	l := mustCreate(t, f.reg)
	initialize(t, f, l)
	waitFor(t, func() bool { return session.Idle(l) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if handed, left := f.reg.HandOver(ctx); handed != 0 || left != 1 || f.reg.Hibernated() != 0 {
		t.Fatalf("HandOver = %d handed over, %d left, %d hibernated; want 0, 1, 0", handed, left, f.reg.Hibernated())
	}
	if got, err := f.reg.Get(context.Background(), l.Token(), ""); err != nil || got != l {
		t.Fatalf("Get after an expired handover: %v, %v; want the same Live", got, err)
	}
}

// TestHandOverRequestServed: requests that looked a session up and have
// been served (their contexts are done) but whose holds are not released
// yet (the goroutines context.AfterFunc starts have not run:
// testenv.LateRelease) do not keep it from the handover; a request still
// being served next to such a one does. Released afterwards, the late
// holds leave the hibernated session as the handover stored it: its
// record keeps generation 1 with no owner, and Get wakes it at
// generation 1 (regression: a session whose client kept its standalone
// GET stream open was often left for Close, and its next process claimed
// generation 2).
func TestHandOverRequestServed(t *testing.T) {
	ctx := context.Background()
	f, _ := hibernating(t, true, session.Options{HibernateAfter: -1, HandOver: true})
	lookUp := func(l *session.Live) *testenv.LateRelease {
		t.Helper()
		req := testenv.NewLateRelease(ctx)
		if got, err := f.reg.Get(req, l.Token(), ""); err != nil || got != l {
			t.Fatalf("Get: %v, %v; want the session's Live", got, err)
		}
		return req
	}
	served := mustCreate(t, f.reg)
	initialize(t, f, served)
	serving := mustCreate(t, f.reg)
	initialize(t, f, serving)
	waitFor(t, func() bool { return session.Idle(served) && session.Idle(serving) })
	var late []*testenv.LateRelease
	for _, l := range []*session.Live{served, served, serving} {
		req := lookUp(l)
		req.End()
		late = append(late, req)
	}
	still := lookUp(serving)
	defer still.End()

	handed, left := f.reg.HandOver(ctx)
	if handed != 1 || left != 1 || f.reg.Hibernated() != 1 {
		t.Fatalf("HandOver = %d handed over, %d left, %d hibernated; want 1, 1, 1", handed, left, f.reg.Hibernated())
	}
	for _, req := range late {
		req.Release()
	}
	waitFor(t, func() bool { return session.Idle(served) })
	rec, err := f.st.Get(ctx, served.Token())
	if err != nil || rec.Generation != 1 || rec.Owner != "" {
		t.Fatalf("record after the handover = %+v, %v; want generation 1, no owner", rec, err)
	}
	woken, err := f.reg.Get(ctx, served.Token(), "")
	if err != nil || woken == served || woken.Generation() != 1 {
		t.Fatalf("Get after the handover: %v, %v; want a new Live at generation 1", woken, err)
	}
	if got, err := f.reg.Get(ctx, serving.Token(), ""); err != nil || got != serving {
		t.Fatalf("Get of the session still served: %v, %v; want its Live, not handed over", got, err)
	}
}
