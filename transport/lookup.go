// lookup.go holds how a request finds its session's live state: the user
// it acts for, and lookup, which asks the fleet's router (package fleet)
// which replica serves the session.

package transport

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
)

// userID returns the user an authenticated request acts for (go-sdk
// auth.TokenInfo.UserID), "" when none: a session is bound to the user who
// created it.
func userID(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		return ti.UserID
	}
	return ""
}

// lookup returns the live session of token for r, as Registry.Get does,
// re-creating its live state at generation+1 when no live process holds
// it. A session another replica owns is served there (fleet.Router.Route):
// lookup then returns forwarded, and nothing is left to do for r; body is
// the POST body already read (nil for GET), which the owner gets. Its
// errors are Get's and the router's (*fleet.Refusal: owner_moved,
// owner_unreachable, unavailable; the directory's); lookupRefusal maps
// every one. check, the request kind's (dormant.go), judges the session's
// record before a session whose live state is not held here is woken or
// re-created for r (session.Registry.GetChecked): its refusal is lookup's
// error, which lookupRefusal returns as it is.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, token string, body []byte, check func(store.Record) error) (live *session.Live, forwarded bool, err error) {
	user := userID(r)
	forwarded, err = h.router.Route(w, r, body, func(ctx context.Context) (err error) {
		live, err = h.reg.GetChecked(ctx, token, user, check)
		return err
	})
	if forwarded || err != nil {
		return nil, forwarded, err
	}
	return live, false, nil
}
