// state.go holds how a Live keeps the session state a later generation
// needs (engine.State): folding in the messages it carries, by the rule of
// engine.State.Fold, and storing the result in the record.

package session

import (
	"context"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/fleet"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Deliver hands an inbound message to the engine, recording the state
// change a notification makes (engine.State.Fold; a call's is recorded when
// it is answered, in Send). A state change that cannot be stored fails the
// delivery, so the client is not told 202 for a notification a later
// generation would not know of. The lease is checked first, as Get checks
// it: a process paused past its lease after the lookup renews it before
// the engine runs anything, and a generation taken over meanwhile is
// dropped and fails the delivery (store.ErrFenced) instead of running the
// message.
func (l *Live) Deliver(ctx context.Context, msg jsonrpc.Message, req engine.Request) error {
	if err := l.reg.checkLease(ctx, l); err != nil {
		return err
	}
	if r, ok := msg.(*jsonrpc.Request); ok && !r.IsCall() && engine.ChangesState(r) {
		if err := l.recordNotification(ctx, r); err != nil {
			return err
		}
	}
	if err := l.eng.Deliver(ctx, msg, req); err != nil {
		return fmt.Errorf("session %s gen %d: deliver: %w", store.Prefix(l.token), l.gen, err)
	}
	return nil
}

// recordNotification folds the inbound notification r into the session
// state and stores the result. When it cannot be stored, the state in
// memory goes back to what it was, unless another change has been folded
// on top meanwhile (that change's save carried r's effect).
func (l *Live) recordNotification(ctx context.Context, r *jsonrpc.Request) error {
	l.mu.Lock()
	prev := l.state
	next, changed := prev.Fold(r, nil)
	l.state = next
	l.mu.Unlock()
	if !changed {
		return nil
	}
	if err := l.saveState(ctx, next); err != nil {
		l.mu.Lock()
		if l.state.Equal(next) {
			l.state = prev
		}
		l.mu.Unlock()
		return err
	}
	return nil
}

// saveState stores st as the session's state, with the ledgers of earlier
// generations, fenced by this generation.
func (l *Live) saveState(ctx context.Context, st engine.State) error {
	b, err := encodeState(&st, l.prior)
	if err != nil {
		return err
	}
	if err := l.reg.st.SaveState(context.WithoutCancel(ctx), l.token, l.gen, b); err != nil {
		if fleet.LostReason(err) == "" {
			// A session that ended, or a generation fenced, is reported
			// by whoever acts on it; the store did not fail.
			l.logger.Warn("saving session state failed", "reason", replay.ReasonStoreError, "error", err)
		}
		return fmt.Errorf("session %s gen %d: save state: %w", store.Prefix(l.token), l.gen, err)
	}
	return nil
}

// State returns a copy of the recorded session state.
func (l *Live) State() engine.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state
	st.Subscriptions = slices.Clone(st.Subscriptions)
	return st
}

// ProtocolVersion returns the protocol version the session negotiated at
// initialize ("" before it), without copying the rest of the state.
func (l *Live) ProtocolVersion() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.ProtocolVersion
}

// Initialized reports whether initialize succeeded on this session.
func (l *Live) Initialized() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.state.InitializeParams) > 0
}
