// suspend.go holds what the registry does with what a hibernated engine
// session keeps outside the process (engine.Suspender) when the session
// ends without being woken (DESIGN.md, "Hibernation").

package session

import (
	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/store"
)

// release hands what the hibernated engine session of rec, a record
// just ended, kept outside the process (engine.State.Suspended) to the
// engine (engine.Releaser). Nothing when another process held the record
// (its live state used what was kept); a record this process held
// without live state here (taken to be ended as idle) still hands it
// over.
func (r *Registry) release(rec store.Record) {
	if rec.Owner != "" && rec.Owner != r.opts.Owner {
		return
	}
	r.releaseKept(rec)
}

// releaseKept hands what rec's hibernated engine session kept outside the
// process to the engine, whoever held rec last; nothing when the engine
// releases nothing or rec keeps nothing. It is also the store's
// EndNotifier callback: the store ended rec's session because no process
// held it (the durable store's sweep of sessions an earlier process left),
// so what was kept is used by no one.
func (r *Registry) releaseKept(rec store.Record) {
	rel, ok := r.engine.(engine.Releaser)
	if !ok {
		return
	}
	st, _, err := decodeState(rec.State)
	if err != nil || st == nil || st.Suspended == nil {
		return
	}
	rel.Release(st.Suspended)
}

// hibernatedTokensLocked returns the token of every session this
// registry hibernated, and empties its index of them. r.mu is held.
func (r *Registry) hibernatedTokensLocked() []string {
	tokens := make([]string, 0, r.hibernated.len())
	r.hibernated.each(func(k tokenKey, long string, _ hibernation) bool {
		if long == "" {
			long = k.String()
		}
		tokens = append(tokens, long)
		return true
	})
	r.hibernated = newHibIndex()
	return tokens
}
