// Package image holds the in-memory image of one session that the memory
// and durable stores keep: its record, the bounds of its log in the current
// generation, whether it ended, and the wake-up of the Waits on it
// (store.Log.Wait). A store changes an Image under its lock, once the
// change is stored (in memory, or committed to disk), and wakes the Waits
// when the bounds, the generation or the end changed.
package image

import (
	"context"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

// Image is one session's image; a new session's is its record and the
// floor of its empty log, HWM+1. Its fields are read and written under
// its lock (the embedded Mutex).
type Image struct {
	sync.Mutex
	// Rec is the session's record as last stored.
	Rec store.Record
	// Floor is the replay floor of the current generation (store.Bounds).
	Floor uint64
	// HWM is the high-water mark (store.Bounds).
	HWM uint64
	// Bytes is the sum of store.Event.Size over the retained events.
	Bytes int64
	// Oldest is the Time of the event at Floor; zero when none is retained.
	Oldest time.Time
	// Ended is the error every call reports once the session ended (a
	// *store.EndedError), nil while it lives.
	Ended error
	// Lost is the *store.LostError of the current generation once events
	// it accepted could not be stored, nil otherwise; a Claim clears it.
	Lost error
	// notify is closed and cleared when Waits must look again; nil while
	// nobody waits, so that a change with no waiter allocates nothing.
	notify chan struct{}
}

// BoundsLocked returns the bounds the image describes. Every event from
// Floor to HWM is retained, so they number HWM-Floor+1.
func (im *Image) BoundsLocked() store.Bounds {
	b := store.Bounds{Generation: im.Rec.Generation, Floor: im.Floor, HWM: im.HWM, Bytes: im.Bytes, Oldest: im.Oldest}
	if im.HWM >= im.Floor {
		b.Events = int(im.HWM - im.Floor + 1)
	}
	return b
}

// Bounds returns the bounds the image describes, or Ended once the session
// ended.
func (im *Image) Bounds() (store.Bounds, error) {
	im.Lock()
	defer im.Unlock()
	if im.Ended != nil {
		return store.Bounds{}, im.Ended
	}
	return im.BoundsLocked(), nil
}

// Record is RecordLocked under the image's lock.
func (im *Image) Record() (store.Record, error) {
	im.Lock()
	defer im.Unlock()
	return im.RecordLocked()
}

// RecordLocked returns a copy of the record (its State copied too), or
// Ended once the session ended.
func (im *Image) RecordLocked() (store.Record, error) {
	if im.Ended != nil {
		return store.Record{}, im.Ended
	}
	rec := im.Rec
	rec.State = Clone(rec.State)
	return rec, nil
}

// CheckLocked returns the error of a write of operation op (as
// store.FencedError names it) carrying generation gen: Ended once the
// session ended, a *store.FencedError when gen is not the record's
// generation, nil otherwise.
func (im *Image) CheckLocked(op string, gen uint64) error {
	if im.Ended != nil {
		return im.Ended
	}
	if im.Rec.Generation != gen {
		return &store.FencedError{Token: im.Rec.Token, Op: op, Have: gen, Want: im.Rec.Generation}
	}
	return nil
}

// ClaimLocked makes rec, which carries the next generation and its owner,
// the record, and empties the log, whose events of older generations can
// never be replayed again: the floor becomes HWM+1 (store.Sessions.Claim).
// It wakes the Waits.
func (im *Image) ClaimLocked(rec store.Record) {
	im.Rec = rec
	im.Lost = nil
	im.Floor, im.Bytes, im.Oldest = im.HWM+1, 0, time.Time{}
	im.WakeLocked()
}

// EndLocked records that the session ended with reason: every later call
// fails with a *store.EndedError naming reason and the record's user, and
// the log retains nothing. It wakes
// the Waits.
func (im *Image) EndLocked(reason store.EndReason) {
	im.Ended = &store.EndedError{Token: im.Rec.Token, Reason: reason, UserID: im.Rec.UserID}
	im.Bytes, im.Oldest = 0, time.Time{}
	im.WakeLocked()
}

// LoseLocked records that the current generation is lost with err (a
// *store.LostError), unless it is already, and wakes the Waits. It reports
// whether it recorded it.
func (im *Image) LoseLocked(err error) bool {
	if im.Lost != nil || im.Ended != nil {
		return false
	}
	im.Lost = err
	im.WakeLocked()
	return true
}

// WakeLocked wakes every Wait on the session.
func (im *Image) WakeLocked() {
	if im.notify != nil {
		close(im.notify)
		im.notify = nil
	}
}

// Wait implements store.Log.Wait for the session: it blocks until HWM
// exceeds after, the generation changes, Floor rises above after+1, the
// session ends (it returns Ended), its generation is lost (it returns
// Lost), or ctx is done (ctx.Err()). A store that
// can close under a Wait gives closing, a channel it closes then, and the
// error to return; a nil closing never fires.
func (im *Image) Wait(ctx context.Context, after uint64, closing <-chan struct{}, closed func() error) error {
	im.Lock()
	gen := im.Rec.Generation
	for {
		switch {
		case im.Ended != nil:
			err := im.Ended
			im.Unlock()
			return err
		case im.HWM > after || im.Floor > after+1 || im.Rec.Generation != gen:
			im.Unlock()
			return nil
		case im.Lost != nil:
			err := im.Lost
			im.Unlock()
			return err
		}
		if im.notify == nil {
			im.notify = make(chan struct{})
		}
		ch := im.notify
		im.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-closing:
			return closed()
		case <-ch:
		}
		im.Lock()
	}
}

// Clone returns a copy of b (nil for nil).
func Clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
