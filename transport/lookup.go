// lookup.go holds how a request finds its session's live state: the user
// it acts for, and resolve, which looks the token up in the registry and
// hands a session another replica owns to forward.go.

package transport

import (
	"errors"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// errServed is resolve's signal that the response has been written: the
// request was forwarded to the session's owner.
var errServed = errors.New("transport: request served")

// userID returns the user an authenticated request acts for (go-sdk
// auth.TokenInfo.UserID), "" when none: a session is bound to the user who
// created it.
func userID(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		return ti.UserID
	}
	return ""
}

// resolve returns the live session of token for r, as Registry.Get does,
// re-creating its live state at generation+1 when no live process holds
// it, except that a session another replica owns is served there: r is
// forwarded to the owner (forward.go), and resolve returns errServed. When
// the owner cannot be reached, resolve waits for its lease to lapse and
// returns the session taken over here, or a *refusal (owner_unreachable,
// owner_moved, unavailable). body is the POST body already read (nil for
// GET). Other errors are Get's; lookupRefusal maps every one.
func (h *Handler) resolve(w http.ResponseWriter, r *http.Request, token string, body []byte) (*session.Live, error) {
	ctx := r.Context()
	var seen *session.RemoteError // the owner and lease the wait is about
	var deadline time.Time
	waiting := false // the wait has been logged
	for {
		live, err := h.reg.Get(ctx, token, userID(r))
		var re *session.RemoteError
		if !errors.As(err, &re) {
			return live, err
		}
		if by := r.Header.Get(ForwardedByHeader); by != "" {
			return nil, refuse(replay.ReasonOwnerMoved, "the session is owned by another replica than the one "+
				quote(by)+" forwarded this request to; retry")
		}
		if seen == nil || seen.Owner != re.Owner || seen.Generation != re.Generation {
			seen, deadline = re, re.LeaseUntil.Add(ownerGrace)
		}
		why := errors.New("no replica directory")
		if h.opts.Directory != nil {
			target, err := h.opts.Directory.Lookup(ctx, re.Owner)
			if errors.Is(err, store.ErrUnavailable) {
				return nil, lookupRefusal(err)
			}
			why = err
			if err == nil {
				ref, unreachable := h.forward(w, r, re, target, body)
				if ref != nil {
					return nil, ref
				}
				if why = unreachable; why == nil {
					return nil, errServed
				}
			}
		}
		// The owner cannot be reached; it may have died, and then its lease
		// lapses soon. Nothing has been acknowledged.
		if !waiting {
			waiting = true
			h.logger.Info("owner unreachable; waiting for its lease to lapse", "session", store.Prefix(token),
				"generation", re.Generation, "owner", re.Owner, "lease_until", re.LeaseUntil, "reason", replay.ReasonOwnerUnreachable, "error", why)
		}
		now := time.Now()
		if !now.Before(deadline) {
			h.logger.Warn("owner unreachable", "session", store.Prefix(token), "generation", re.Generation,
				"owner", re.Owner, "reason", replay.ReasonOwnerUnreachable)
			return nil, refuse(replay.ReasonOwnerUnreachable, "the replica "+quote(re.Owner)+" that owns the session "+
				"cannot be reached and still holds its lease; retry")
		}
		t := time.NewTimer(min(ownerPoll, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
