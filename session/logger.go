// logger.go holds lazyHandler, the log handler of a Live.

package session

import (
	"context"
	"log/slog"
	"sync"

	"github.com/tidemark-mcp/tidemark/store"
)

// lazyHandler is a Live's log handler: its parent's handler with the
// session's attributes (session token prefix, generation), built when the
// session first logs a line at an enabled level. Most sessions never do,
// and the standard handlers' WithAttrs pre-formats the attributes into a
// handler of their own, a few hundred bytes per session.
type lazyHandler struct {
	parent slog.Handler
	live   *Live
	once   sync.Once
	h      slog.Handler
}

func (lh *lazyHandler) handler() slog.Handler {
	lh.once.Do(func() {
		lh.h = lh.parent.WithAttrs([]slog.Attr{
			slog.String("session", store.Prefix(lh.live.token)),
			slog.Uint64("generation", lh.live.gen),
		})
	})
	return lh.h
}

func (lh *lazyHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return lh.parent.Enabled(ctx, level)
}

func (lh *lazyHandler) Handle(ctx context.Context, r slog.Record) error {
	return lh.handler().Handle(ctx, r)
}

func (lh *lazyHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return lh.handler().WithAttrs(attrs)
}

func (lh *lazyHandler) WithGroup(name string) slog.Handler {
	return lh.handler().WithGroup(name)
}
