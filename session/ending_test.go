// ending_test.go holds the tests of a session while it is being ended:
// from the moment its end begins it answers as ended, and no request
// re-creates it.

package session_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-mcp/tidemark/engine/gosdk"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/internal/demo"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/memory"
)

// slowEnd is a store whose End of the token in hold, once set, signals
// entered and waits for release before ending the record; no real store
// can be held inside End on demand. It counts the Claims (re-creations).
type slowEnd struct {
	store.Store
	hold    atomic.Pointer[string]
	entered chan struct{}
	release chan struct{}
	claims  atomic.Int32
}

func (s *slowEnd) End(ctx context.Context, token string, reason store.EndReason, until time.Time) error {
	if h := s.hold.Load(); h != nil && *h == token {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.End(ctx, token, reason, until)
}

func (s *slowEnd) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, token, owner, from, leaseUntil)
}

// TestEndingSessionAnswersEnded: while the store ends a session's record
// (its End held open by the test), the session has left the registry but
// its record is still live. A request in that gap finds the session ended
// with the end's reason (Get: *store.EndedError; Status: Deleted after
// DELETE, Evicted after an eviction) and
// never re-creates it at generation 2; once the end completes, the store
// holds the tombstone and the registry holds nothing. Both ways a session
// ends are covered: End (DELETE), and eviction to make room at
// MaxSessions.
func TestEndingSessionAnswersEnded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason store.EndReason
		status replay.Status
		end    func(reg *session.Registry, token string) error
	}{
		{"deleted", store.EndDeleted, replay.Deleted, func(reg *session.Registry, token string) error {
			return reg.End(context.Background(), token, store.EndDeleted)
		}},
		{"capacity", store.EndCapacity, replay.Evicted, func(reg *session.Registry, token string) error {
			l, err := reg.Create(context.Background(), "")
			if err == nil {
				err = reg.End(context.Background(), l.Token(), store.EndDeleted)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := &slowEnd{Store: memory.New(memory.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
			reg := session.New(st, eventlog.New(st, eventlog.Options{}), gosdk.New(demo.NewServer()),
				session.Options{MaxSessions: 1, Logger: slog.New(slog.DiscardHandler)})
			defer reg.Close()
			tok := mustCreate(t, reg).Token()
			st.hold.Store(&tok)

			var wg sync.WaitGroup
			var endErr error
			wg.Go(func() { endErr = tc.end(reg, tok) })
			<-st.entered // the end has begun; the record is still live

			l, err := reg.Get(ctx, tok, "")
			var ended *store.EndedError
			if !errors.As(err, &ended) || ended.Reason != tc.reason {
				gen := uint64(0)
				if l != nil {
					gen = l.Generation()
				}
				t.Errorf("Get during the end: live generation %d, error %v; want a *store.EndedError, reason %s", gen, err, tc.reason)
			}
			status, _, err := reg.Status(ctx, tok)
			if status != tc.status || err != nil {
				t.Errorf("Status during the end = %v, %v; want %v", status, err, tc.status)
			}

			close(st.release)
			wg.Wait()
			if endErr != nil {
				t.Fatalf("end: %v", endErr)
			}
			if _, err := st.Get(ctx, tok); !errors.As(err, &ended) || ended.Reason != tc.reason {
				t.Errorf("store after the end: %v, want a tombstone with reason %s", err, tc.reason)
			}
			if n := st.claims.Load(); n != 0 {
				t.Errorf("the session was re-created %d times, want 0", n)
			}
			if _, err := reg.Get(ctx, tok, ""); !errors.As(err, &ended) || ended.Reason != tc.reason {
				t.Errorf("Get after the end: %v, want a *store.EndedError, reason %s", err, tc.reason)
			}
			if n := reg.Len(); n != 0 {
				t.Errorf("registry holds %d sessions after the end, want 0", n)
			}
		})
	}
}

// TestEndedSessionAnswersItsUserOnly: an ended session belongs to the
// user who created it as a live one does. While its end is under way and
// after, Get by that user reports the end (*store.EndedError with the
// reason and the user), Get by another user ErrForbidden (the answer of
// a token that never existed), and Status gives the user with the
// status, for the caller to check. The end may be DELETE in the process
// that holds the session, an eviction to make room, or DELETE in a
// process that does not hold it (another replica, or after a restart),
// which reads the record for its user.
func TestEndedSessionAnswersItsUserOnly(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reason    store.EndReason
		status    replay.Status
		elsewhere bool // a second registry on the same store ends it
	}{
		{"deleted", store.EndDeleted, replay.Deleted, false},
		{"capacity", store.EndCapacity, replay.Evicted, false},
		{"deleted elsewhere", store.EndDeleted, replay.Deleted, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := &slowEnd{Store: memory.New(memory.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
			newReg := func() *session.Registry {
				reg := session.New(st, eventlog.New(st, eventlog.Options{}), gosdk.New(demo.NewServer()),
					session.Options{MaxSessions: 1, Logger: slog.New(slog.DiscardHandler)})
				t.Cleanup(func() { reg.Close() })
				return reg
			}
			reg := newReg()
			l, err := reg.Create(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			tok := l.Token()
			ender := reg
			if tc.elsewhere {
				ender = newReg()
			}
			st.hold.Store(&tok)
			var wg sync.WaitGroup
			var endErr error
			wg.Go(func() {
				if tc.reason == store.EndCapacity {
					var l *session.Live
					if l, endErr = reg.Create(ctx, "carol"); endErr == nil {
						endErr = reg.End(ctx, l.Token(), store.EndDeleted)
					}
					return
				}
				endErr = ender.End(ctx, tok, tc.reason)
			})
			<-st.entered // the end has begun; the record is still live

			check := func(when string) {
				t.Helper()
				want := store.EndedError{Token: tok, Reason: tc.reason, UserID: "alice"}
				var ended *store.EndedError
				if _, err := ender.Get(ctx, tok, "alice"); !errors.As(err, &ended) || *ended != want {
					t.Errorf("Get by the session's user %s: %v, want %+v", when, err, want)
				}
				if _, err := ender.Get(ctx, tok, "bob"); !errors.Is(err, session.ErrForbidden) || errors.Is(err, store.ErrEnded) {
					t.Errorf("Get by another user %s: %v, want ErrForbidden only", when, err)
				}
				status, rec, err := ender.Status(ctx, tok)
				if status != tc.status || rec.UserID != "alice" || err != nil {
					t.Errorf("Status %s = %v, user %q, %v; want %v, user alice", when, status, rec.UserID, err, tc.status)
				}
			}
			check("during the end")
			close(st.release)
			wg.Wait()
			if endErr != nil {
				t.Fatalf("end: %v", endErr)
			}
			check("after the end")
		})
	}
}

// TestIdleRecordAnswersItsUserOnly: a request that finds a record idle
// past IdleTTL in the store (no process holds its live state) ends it;
// only the session's user learns so, before and after the end.
func TestIdleRecordAnswersItsUserOnly(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{IdleTTL: time.Minute})
	l, err := f.reg.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	other := session.New(f.st, eventlog.New(f.st, eventlog.Options{Now: f.clk.Now}), gosdk.New(demo.NewServer()),
		session.Options{IdleTTL: time.Minute, Now: f.clk.Now, Logger: slog.New(slog.DiscardHandler)})
	defer other.Close()
	f.clk.Advance(2 * time.Minute)
	for _, step := range []struct {
		user string
		want error
	}{
		{"bob", session.ErrForbidden}, // before the end: the record is another user's
		{"alice", store.ErrEnded},     // ends it, idle
		{"bob", session.ErrForbidden}, // the tombstone is another user's
		{"alice", store.ErrEnded},
	} {
		_, err := other.Get(ctx, tok, step.user)
		if !errors.Is(err, step.want) {
			t.Fatalf("Get by %s: %v, want %v", step.user, err, step.want)
		}
		var ended *store.EndedError
		want := store.EndedError{Token: tok, Reason: store.EndIdle, UserID: "alice"}
		if step.want == store.ErrEnded && (!errors.As(err, &ended) || *ended != want) {
			t.Fatalf("Get by %s: %v, want %+v", step.user, err, want)
		}
		if step.want == session.ErrForbidden && errors.Is(err, store.ErrEnded) {
			t.Fatalf("Get by %s: %v tells the session ended", step.user, err)
		}
	}
}

// TestUserlessSessionAfterAuthorization: a session created before
// authorization was turned on belongs to no user; once requests carry
// users, none of them may use it, live in this process or stored for
// another, exactly as another user's session, while a request without a
// user (authorization off again) still may.
func TestUserlessSessionAfterAuthorization(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, session.Options{})
	l, err := f.reg.Create(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	if _, err := f.reg.Get(ctx, tok, "alice"); !errors.Is(err, session.ErrForbidden) {
		t.Fatalf("live session, by alice: %v, want ErrForbidden", err)
	}
	other := session.New(f.st, eventlog.New(f.st, eventlog.Options{Now: f.clk.Now}), gosdk.New(demo.NewServer()),
		session.Options{Now: f.clk.Now, Logger: slog.New(slog.DiscardHandler)})
	defer other.Close()
	if _, err := other.Get(ctx, tok, "alice"); !errors.Is(err, session.ErrForbidden) {
		t.Fatalf("stored session, by alice: %v, want ErrForbidden", err)
	}
	if got, err := f.reg.Get(ctx, tok, ""); err != nil || got.Token() != tok {
		t.Fatalf("live session, without a user: %v, %v", got, err)
	}
}
