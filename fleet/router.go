// router.go holds the Router: for each request, the replica that serves
// its session, and the wait for an owner that cannot be reached.

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// ForwardedByHeader is set on a forwarded request to the ID of the replica
// that forwarded it. A request that carries it and finds that the session
// is, again, owned elsewhere is refused (503 owner_moved, Retry-After: 1)
// rather than forwarded a second time, so that replicas that disagree on
// the owner for a moment cannot bounce a request between them.
const ForwardedByHeader = "Tidemark-Forwarded-By"

// Timings of the wait for an owner that cannot be reached.
const (
	// ownerPoll is how often a replica that cannot reach a session's owner
	// looks the session up again, waiting for the lease to lapse.
	ownerPoll = 200 * time.Millisecond
	// ownerGrace is how long past the owner's lease expiry (as first seen)
	// the wait goes on before the request is refused with
	// owner_unreachable: the owner renewed its lease meanwhile, so it is
	// alive but cannot be reached from here.
	ownerGrace = time.Second
)

// Refusal is Route's error for a request the fleet cannot serve now:
// Reason, a word of the catalogue (replay/reason.go), gives the status,
// and Message says what went wrong and what to do next. Nothing was
// written when Route returns it.
type Refusal struct {
	Reason  replay.Reason
	Message string
}

func (e *Refusal) Error() string { return e.Reason.String() + ": " + e.Message }

func refuse(reason replay.Reason, message string) *Refusal {
	return &Refusal{Reason: reason, Message: message}
}

// RouterOptions configures a Router. The zero value routes without a
// directory: a request for a session another owner holds waits for that
// owner's lease to lapse, then is served here.
type RouterOptions struct {
	// Directory locates the replica that owns a session another replica
	// holds, so that requests for it are forwarded there; the forwarded
	// request carries ForwardedByHeader with this replica's ID
	// (Leases.Owner). Nil: single-process mode.
	Directory Directory
	// Self is the URL at which this replica announces itself in
	// Directory. An owner Directory places at Self is an earlier process
	// at this replica's address (restarted in place under another replica
	// ID), which cannot be running while this one listens there: it is
	// treated as unreachable, so the request waits for its lease to lapse
	// and takes the session over, instead of being forwarded to this
	// replica itself and refused as owner_moved. Empty: no owner is
	// recognised so.
	Self string
	// KeepAlive is how often an owner writes at least a comment on an idle
	// SSE stream (transport.Options.KeepAlive): a forwarded stream that
	// brings nothing for twice it ends, and the client resumes. Zero or
	// negative: a forwarded stream never ends for silence.
	KeepAlive time.Duration
	// JSONResponse says this fleet answers calls as one application/json
	// body (transport.Options.JSONResponse), whose headers come with the
	// whole answer, however long the call runs: a POST forwarded to an
	// owner then waits for its answer while the owner holds its lease,
	// with no other bound (Leases.Await).
	JSONResponse bool
	// Records reads a session's record as the store holds it, without
	// claiming it (session.Registry.Status), so that a request forwarded
	// to an owner waits for its answer exactly while the owner holds its
	// lease (Leases.Await). Nil: the lease the lookup found is never seen
	// renewed, and a forwarded request that is not answered within it is
	// given up then.
	Records func(ctx context.Context, token string) (store.Record, error)
	// Answering returns, for the takeover rule (Leases.Remote), when this
	// replica's store answered again after the last break it saw (zero:
	// none), as session.Registry.Answering does. Nil: no break is ever
	// seen, and an owner holds its session exactly while its lease has
	// not lapsed.
	Answering func(now time.Time) time.Time
	// Logger receives the router's lines, with the session's token prefix,
	// generation and owner. Default slog.Default().
	Logger *slog.Logger
}

// Router serves each request for a session at the replica that owns the
// session's live state (see the package comment): here, or, forwarded,
// at the owner. It is safe for concurrent use.
type Router struct {
	leases Leases
	opts   RouterOptions
	logger *slog.Logger
	fwd    *http.Transport // forwarded requests

	active   sync.WaitGroup     // forwarded requests under way
	stopOnce sync.Once          //
	stopped  chan struct{}      // closed by Shutdown
	stopCtx  context.Context    // cancelled by Shutdown
	stop     context.CancelFunc //
}

// NewRouter returns the Router of the replica whose lease rules are
// leases (session.Registry.Leases).
func NewRouter(leases Leases, opts RouterOptions) *Router {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	rt := &Router{
		leases: leases, opts: opts, logger: opts.Logger,
		fwd:     newForwardTransport(),
		stopped: make(chan struct{}),
	}
	rt.stopCtx, rt.stop = context.WithCancel(context.Background())
	return rt
}

// Route serves r, a request for the session that lookup looks up, at the
// replica that owns the session. lookup returns nil when this process
// holds the session's live state (it then holds it for the caller, which
// serves r here: Route returns forwarded false and a nil error), a
// *RemoteError when another replica holds it under a lease that has not
// lapsed, and any other error, which Route returns as it is.
//
// While another replica owns the session, Route forwards r there, with
// body as its body when it is not nil (a POST body read already), and
// returns forwarded true once the owner's answer was streamed back, or
// cut after it began (the client resumes), or the client went away. The
// wait for the answer to begin lasts while the owner holds its lease
// (Leases.Await): when the lease lapses first (the owner is stopped or
// dead), the request is given up and the session looked up again, which
// takes it over at generation+1 or finds its new owner; the owner refuses
// the request it may hold, since it checks its lease before it serves
// (see the package comment). When the owner cannot be connected to,
// nothing is sent: Route looks the session up again every ownerPoll until
// the owner's lease lapses, for at most the lease expiry first seen plus
// ownerGrace; nothing is acknowledged meanwhile.
//
// Its other errors are *Refusal, with nothing written: owner_moved for a
// forwarded request that finds yet another owner; owner_unreachable for
// an owner that keeps its lease and cannot be connected to, or failed
// after the request was sent, or did not answer it within a lease TTL,
// or renewed its lease after the request was given up (the owner may
// have seen it: it is never sent twice, and the client decides whether
// to retry); unavailable at shutdown. And the directory's
// store.ErrUnavailable, and the request's context error.
func (rt *Router) Route(w http.ResponseWriter, r *http.Request, body []byte, lookup func(context.Context) error) (forwarded bool, err error) {
	ctx := r.Context()
	var seen *RemoteError // the owner and lease the wait is about
	var deadline time.Time
	waiting := false      // the wait has been logged
	var sent *RemoteError // the owner a request given up unanswered was sent to
	for {
		err := lookup(ctx)
		if err == nil {
			return false, nil // served here (re, taken by address below, is made only when needed)
		}
		var re *RemoteError
		if !errors.As(err, &re) {
			return false, err
		}
		if by := r.Header.Get(ForwardedByHeader); by != "" {
			return false, refuse(replay.ReasonOwnerMoved, "the session is owned by another replica than the one "+
				quote(by)+" forwarded this request to; retry")
		}
		if sent != nil && sent.Owner == re.Owner {
			rt.logger.Warn("the owner renewed its lease after a request forwarded to it was given up", "session", store.Prefix(re.Token),
				"generation", re.Generation, "owner", re.Owner, "reason", replay.ReasonOwnerUnreachable)
			return false, refuse(replay.ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
				"did not answer and holds its lease again; it may have seen the request: retry")
		}
		if seen == nil || seen.Owner != re.Owner || seen.Generation != re.Generation {
			seen, deadline = re, re.LeaseUntil.Add(ownerGrace)
		}
		why := errors.New("no replica directory")
		if rt.opts.Directory != nil {
			target, err := rt.opts.Directory.Lookup(ctx, re.Owner)
			if errors.Is(err, store.ErrUnavailable) {
				return false, err
			}
			why = err
			if err == nil && rt.opts.Self != "" && target == rt.opts.Self {
				err = fmt.Errorf("owner %q is announced at this replica's own URL %s: it is an earlier process at this address, which is not running", re.Owner, quote(target))
				why = err
			}
			if err == nil {
				switch out, err := rt.forward(w, r, re, target, body); out {
				case answered:
					return true, nil
				case refused:
					return false, err
				case givenUp:
					sent = re
					continue
				default:
					why = err
				}
			}
		}
		// The owner cannot be reached; it may have died, and then its lease
		// lapses soon. Nothing has been acknowledged.
		if !waiting {
			waiting = true
			rt.logger.Info("owner unreachable; waiting for its lease to lapse", "session", store.Prefix(re.Token),
				"generation", re.Generation, "owner", re.Owner, "lease_until", re.LeaseUntil, "reason", replay.ReasonOwnerUnreachable, "error", why)
		}
		now := time.Now()
		if !now.Before(deadline) {
			rt.logger.Warn("owner unreachable", "session", store.Prefix(re.Token), "generation", re.Generation,
				"owner", re.Owner, "reason", replay.ReasonOwnerUnreachable)
			return false, refuse(replay.ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
				"cannot be reached and still holds its lease; retry")
		}
		t := time.NewTimer(min(ownerPoll, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// Shutdown ends the requests being forwarded: one whose answer has not
// begun is refused with 503 unavailable, a stream being forwarded ends
// (the client resumes). It waits for them until ctx ends, then closes
// the idle connections to owners.
func (rt *Router) Shutdown(ctx context.Context) {
	rt.stopOnce.Do(func() {
		close(rt.stopped)
		rt.stop()
	})
	done := make(chan struct{})
	go func() { rt.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	rt.fwd.CloseIdleConnections()
}

// shuttingDown reports whether Shutdown was called.
func (rt *Router) shuttingDown() bool {
	select {
	case <-rt.stopped:
		return true
	default:
		return false
	}
}

// answering returns RouterOptions.Answering's answer at now.
func (rt *Router) answering(now time.Time) time.Time {
	if rt.opts.Answering == nil {
		return time.Time{}
	}
	return rt.opts.Answering(now)
}

// quote bounds and quotes a client-supplied value for an error message.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}
