// ahead.go holds what a resume whose cursor is above the high-water mark
// of the live generation does to that generation (Live.EndAhead).

package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// ErrConfirmedLost: a client holds a cursor of the live generation above
// the session's high-water mark. The high-water mark is the durable
// watermark and no client is ever sent an event above it (store.Log,
// "Durability and visibility"), so the store lost events it had
// confirmed (a data directory or a Redis file restored from a backup, a
// Redis that lost acknowledged writes), or the cursor was made up.
var ErrConfirmedLost = errors.New("the store lost events it had confirmed")

// aheadError is the error of a generation ended by EndAhead or EndAbove:
// the cursor a resume named, the high-water mark then, and whether the
// cursor's generation, not its sequence, was above the session's.
type aheadError struct {
	cursor replay.Cursor
	hwm    uint64
	above  bool
}

func (e *aheadError) Error() string {
	if e.above {
		return fmt.Sprintf("%v: a cursor of generation %d, above the session's, was resumed", ErrConfirmedLost, e.cursor.Generation)
	}
	return fmt.Sprintf("%v: cursor sequence %d of generation %d is above the high-water mark %d",
		ErrConfirmedLost, e.cursor.Sequence, e.cursor.Generation, e.hwm)
}

func (e *aheadError) Unwrap() error { return ErrConfirmedLost }

// EndAhead ends l's generation in this process after a resume named c, a
// cursor of that generation whose sequence is above hwm, the session's
// high-water mark (replay.CursorAhead, answered 400 cursor_ahead). Every
// sequence above hwm may name an event a client received before the
// store lost it, so the generation appends nothing more: its later
// appends fail with a *store.LostError, its live state is dropped as for
// a generation whose events were not stored (replay.ReasonGenerationLost,
// logged once at WARN with the cursor and hwm, or at DEBUG when another
// such line went out less than aheadWarnInterval ago: warnAhead), and
// the next request re-creates the session at generation+1, whose ids no
// client holds (DESIGN.md, "The replay decision"). A second call for the
// same generation does nothing.
func (l *Live) EndAhead(c replay.Cursor, hwm uint64) {
	if !l.ahead.CompareAndSwap(nil, &aheadError{cursor: c, hwm: hwm}) {
		return
	}
	l.reg.drop(l, replay.ReasonGenerationLost, l.ahead.Load())
}

// maxClaimAbove bounds the generations one re-creation claims to get past
// the generation a resume named (claimAbove): each is a store write, and
// a store restored from a backup is a few generations behind its
// clients, where a made-up cursor may name any.
const maxClaimAbove = 16

// EndAbove ends l's generation in this process after a resume named c, a
// cursor of a generation above l's, at hwm, the session's high-water mark
// (replay.GenerationMismatch, answered 409). The store never issued such a
// generation as it stands, so it lost events it had confirmed (a backup
// restored behind a session that went on to later generations) or c was
// made up, and ids of every generation up to c's may be in a client's
// hands: the generation appends nothing more, as after EndAhead, and the
// re-creation of the session by this registry claims generations until
// it holds one above c's, at most maxClaimAbove past the record's
// (DESIGN.md, "The replay decision"). A second call for the same
// generation does nothing.
func (l *Live) EndAbove(c replay.Cursor, hwm uint64) {
	if !l.ahead.CompareAndSwap(nil, &aheadError{cursor: c, hwm: hwm, above: true}) {
		return
	}
	l.reg.noteAbove(l.token, c.Generation)
	l.reg.drop(l, replay.ReasonGenerationLost, l.ahead.Load())
}

// noteAbove records gen, a generation a resume of token's session named
// above the session's, for claimAbove.
func (r *Registry) noteAbove(token string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.above[token]; ok || len(r.above) < lostHereMax {
		r.above[token] = max(cur, gen)
	}
}

// claimAbove claims, after claimed, the generation a re-creation has just
// claimed, the generations that follow until it holds one above the
// generation a resume named (noteAbove), at most maxClaimAbove, and
// returns the record of the last. The claims discard nothing more: the
// first emptied the log. On an error the note stays, for the next
// re-creation, and claimed is returned with it.
func (r *Registry) claimAbove(ctx context.Context, claimed store.Record, lease time.Time) (store.Record, error) {
	token := claimed.Token
	r.mu.Lock()
	above, ok := r.above[token]
	delete(r.above, token)
	r.mu.Unlock()
	for n := 0; ok && claimed.Generation <= above && n < maxClaimAbove; n++ {
		next, err := r.st.Claim(ctx, token, r.opts.Owner, claimed.Generation, lease)
		if err != nil {
			r.noteAbove(token, above)
			return claimed, err
		}
		claimed = next
	}
	return claimed, nil
}

// aheadWarnInterval is the least time between two WARN lines of a
// generation ended by EndAhead, or by EndAbove, in one process: a client
// may send any number of made-up cursors, and each ends a generation.
const aheadWarnInterval = time.Second

// warnAhead logs msg with attrs on l's logger, the line of a generation
// that EndAhead (above false) or EndAbove (above true) ended: at WARN when
// the gate lets a line of that kind through (one per aheadWarnInterval
// for the whole registry), with suppressed, the number of that kind's
// lines held back since the last one, when there were any; at DEBUG
// otherwise.
func (r *Registry) warnAhead(l *Live, above bool, msg string, attrs ...any) {
	level := slog.LevelDebug
	if ok, n := r.aheadWarns.Pass(above); ok {
		level = slog.LevelWarn
		if n > 0 {
			attrs = append(attrs, "suppressed", n)
		}
	}
	l.logger.Log(context.Background(), level, msg, attrs...)
}

// refuseAhead returns the *store.LostError of an append to a generation
// that EndAhead ended, or nil.
func (l *Live) refuseAhead() error {
	e := l.ahead.Load()
	if e == nil {
		return nil
	}
	return &store.LostError{Token: l.token, Generation: l.gen, Seq: e.hwm + 1, Err: e}
}
