// ahead.go holds what a resume whose cursor is above the high-water mark
// of the live generation does to that generation (Live.EndAhead).

package session

import (
	"errors"
	"fmt"

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

// aheadError is the error of a generation ended by EndAhead: the cursor
// a resume named and the high-water mark it was above.
type aheadError struct {
	cursor replay.Cursor
	hwm    uint64
}

func (e *aheadError) Error() string {
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
// logged once at WARN with the cursor and hwm), and the next request
// re-creates the session at generation+1, whose ids no client holds
// (DESIGN.md, "The replay decision"). A second call for the same
// generation does nothing.
func (l *Live) EndAhead(c replay.Cursor, hwm uint64) {
	if !l.ahead.CompareAndSwap(nil, &aheadError{cursor: c, hwm: hwm}) {
		return
	}
	l.reg.drop(l, replay.ReasonGenerationLost, l.ahead.Load())
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
