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
