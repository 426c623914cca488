package durable

// This file holds the pipelined append's side of the committer: what one
// group does to the sessions whose events it holds (their log meta, their
// durable watermark, back-pressure), and the loss of a generation whose
// events could not be stored.

import (
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// appendReq is one pipelined Append waiting for the committer: events
// first to first+n-1 of generation gen, whose Size adds to bytes.
type appendReq struct {
	ss     *sess
	gen    uint64
	first  uint64
	n      int
	bytes  int64
	oldest time.Time // the Time of the first event
	linger bool      // every event lingers (store.Event.Linger): the committer may hold it back
}

// pipelined is what one group does to the sessions it touches.
type pipelined struct {
	touched map[*sess]*groupSess
	order   []*sess // touched, in the order first touched
	lost    []lostGen
}

// lostGen is a generation the group lost, and the append that lost it,
// whose room is released once the loss is reported (so that a Sync that
// returns finds it reported).
type lostGen struct {
	err *store.LostError
	app *appendReq
}

// groupSess is one session's part of a group.
type groupSess struct {
	appended bool
	last     uint64 // highest sequence the group stores
	n        int
	bytes    int64
	oldest   time.Time // Time of the group's first event of the session
}

func (p *pipelined) get(ss *sess) *groupSess {
	if g := p.touched[ss]; g != nil {
		return g
	}
	if p.touched == nil {
		p.touched = make(map[*sess]*groupSess)
	}
	g := &groupSess{}
	p.touched[ss] = g
	p.order = append(p.order, ss)
	return g
}

// add records that the group holds r.
func (p *pipelined) add(r commitReq) {
	if r.meta != nil {
		p.get(r.meta)
	}
	a := r.app
	if a == nil {
		return
	}
	g := p.get(a.ss)
	if !g.appended {
		g.appended, g.oldest = true, a.oldest
	}
	g.last = a.first + uint64(a.n) - 1
	g.n += a.n
	g.bytes += a.bytes
}

// dropped reports whether a belongs to a generation that is lost (or was
// left), and then releases its room: its events are never stored.
func (p *pipelined) dropped(a *appendReq) bool {
	ss := a.ss
	ss.Lock()
	gone := ss.Lost != nil || ss.Ended != nil || ss.Rec.Generation != a.gen
	ss.Unlock()
	if gone {
		ss.pend.Release(a.n, a.bytes)
	}
	return gone
}

// lose records that a could not be stored because of err: its generation
// is lost, unless it was already.
func (p *pipelined) lose(a *appendReq, err error) {
	ss := a.ss
	lerr := &store.LostError{Token: ss.token, Generation: a.gen, Seq: a.first, Err: err}
	ss.Lock()
	recorded := ss.Rec.Generation == a.gen && ss.LoseLocked(lerr)
	ss.Unlock()
	if recorded {
		p.lost = append(p.lost, lostGen{err: lerr, app: a})
		return
	}
	ss.pend.Release(a.n, a.bytes)
}

// writeMeta adds to gb the log meta of every session the group touches:
// its image, which holds every earlier group and the floors Trim raised,
// moved by the group's events.
func (p *pipelined) writeMeta(gb *pebble.Batch) {
	for _, ss := range p.order {
		g := p.touched[ss]
		ss.Lock()
		m := ss.metaLocked()
		ss.Unlock()
		if g.appended {
			if m.hwm < m.floor {
				m.oldest = g.oldest
			}
			m.hwm = g.last
			m.bytes += g.bytes
		}
		gb.Set(tokenKey(kindMeta, ss.token), encodeMeta(m), nil)
	}
}

// publish makes the group's events visible, once stored: each session's
// durable watermark moves to its last event, and its Waits wake.
func (s *Store) publish(p *pipelined) {
	s.publishing.Lock()
	defer s.publishing.Unlock()
	for _, ss := range p.order {
		g := p.touched[ss]
		if !g.appended {
			continue
		}
		ss.Lock()
		few := ss.HWM <= ss.Floor // it held at most one event: it may now be trimmed
		if ss.HWM < ss.Floor {
			ss.Oldest = g.oldest
		}
		ss.HWM = g.last
		ss.Bytes += g.bytes
		// Released under the lock, so that assignedBounds never counts
		// the group's bytes both as stored and as pending.
		ss.pend.Release(g.n, g.bytes)
		ss.WakeLocked()
		ss.Unlock()
		s.total.Add(g.bytes)
		if few {
			s.requeue(ss)
		}
	}
}

// notify logs each generation the group lost and tells the LossNotifier.
func (p *pipelined) notify(s *Store) {
	for _, l := range p.lost {
		lerr := l.err
		s.logger.Warn("events could not be stored; the generation ends", "session", store.Prefix(lerr.Token),
			"generation", lerr.Generation, "cursor", lerr.Seq, "reason", replay.ReasonGenerationLost, "error", lerr.Err)
		if f := s.onLost.Load(); f != nil {
			(*f)(lerr.Token, lerr.Generation, lerr)
		}
		l.app.ss.pend.Release(l.app.n, l.app.bytes)
	}
}

// NotifyLost implements store.LossNotifier.
func (s *Store) NotifyLost(f func(token string, gen uint64, err error)) {
	s.onLost.Store(&f)
}
