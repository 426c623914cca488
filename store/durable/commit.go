package durable

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"

	"github.com/tidemark-mcp/tidemark/store"
)

// maxGroup bounds the writes committed with one fsync, so one group's batch
// stays small next to the memtable.
const maxGroup = 1024

// commitReq is one write waiting for the committer.
type commitReq struct {
	b     *pebble.Batch
	grows bool // adds data: refused while the file system is low on space
	// done receives the outcome; nil for a pipelined append, whose
	// outcome the committer records in the session (pipeline.go), and for
	// a trim, which nobody waits for.
	done chan error
	app  *appendReq // a pipelined append: the events are in b
	// meta names a session whose log meta the committer writes with the
	// group, from its image (a Trim's).
	meta *sess
}

// lingers reports whether r is a pipelined append of events that may wait
// for the session's next append (store.Event.Linger).
func (r commitReq) lingers() bool { return r.app != nil && r.app.linger }

// committer commits the batches of all sessions in groups, one fsync per
// group (group commit).
type committer struct {
	s    *Store
	in   chan commitReq
	quit chan struct{}
	done chan struct{}
	// held are the lingering appends set aside, in the order queued, each
	// until its deadline or until its session appends again (hold).
	held []heldReq
}

// heldReq is a lingering append the committer holds back until until.
type heldReq struct {
	r     commitReq
	until time.Time
}

func newCommitter(s *Store) *committer {
	c := &committer{s: s, in: make(chan commitReq, maxGroup), quit: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// commit hands b to the committer and returns when it is durable, or the
// error that kept it from being stored (nothing of b is then stored). The
// batch is closed.
func (s *Store) commit(b *pebble.Batch, grows bool) error {
	return s.commitReq(commitReq{b: b, grows: grows})
}

// commitReq is commit for a request that may name a session whose meta
// the committer writes.
func (s *Store) commitReq(r commitReq) error {
	r.done = make(chan error, 1)
	if err := s.enqueue(r); err != nil {
		return err
	}
	return <-r.done
}

// enqueue hands r to the committer. It fails, closing r.b, once the
// committer has stopped.
func (s *Store) enqueue(r commitReq) error {
	select {
	case s.c.in <- r:
		return nil
	case <-s.c.done:
		r.b.Close()
		return s.unavailable("commit")
	}
}

func (c *committer) stop() {
	close(c.quit)
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	for {
		first, ok := c.wait()
		if !ok {
			return
		}
		if first == nil {
			continue // held appends came due, and are committed
		}
		group := []commitReq{*first}
		if w := c.s.opts.CommitWindow; w > 0 {
			t := time.NewTimer(w)
		window:
			for len(group) < maxGroup {
				select {
				case r := <-c.in:
					group = append(group, r)
				case <-t.C:
					break window
				}
			}
			t.Stop()
		}
		if group = c.hold(c.take(group), time.Now()); len(group) > 0 {
			c.commitGroup(group)
		}
	}
}

// wait returns the next request queued. Meanwhile it commits the held
// appends that come due (then it returns nil), and when the store closes
// it commits everything queued or held and returns false.
func (c *committer) wait() (*commitReq, bool) {
	var due <-chan time.Time
	if len(c.held) > 0 {
		t := time.NewTimer(time.Until(c.held[0].until))
		defer t.Stop()
		due = t.C
	}
	select {
	case r := <-c.in:
		return &r, true
	case <-due:
		c.commitGroup(c.hold(c.take(nil), time.Now()))
		return nil, true
	case <-c.quit:
		// Writers hold the store's close lock shared while they queue,
		// so nothing is queued once Close holds it exclusively; the
		// pipelined appends queued before, and those held back, are
		// committed now.
		group := c.hold(nil, time.Now().Add(time.Duration(1<<62)))
		for group = c.take(group); len(group) > 0; group = c.take(nil) {
			c.commitGroup(group)
		}
		return nil, false
	}
}

// hold returns what of group and of the held appends to commit now: the
// held appends that are due at now or whose session has a request in
// group that does not linger, before group's requests, then group's
// requests except the lingering appends of sessions with nothing else in
// it, which it holds back for Options.Linger. A session's requests keep
// their order: its held appends go no later than its next request.
func (c *committer) hold(group []commitReq, now time.Time) []commitReq {
	urgent := make(map[*sess]bool)
	for _, r := range group {
		if r.app != nil && !r.lingers() {
			urgent[r.app.ss] = true
		}
	}
	var out []commitReq
	keep := c.held[:0]
	for _, h := range c.held {
		if !h.until.After(now) || urgent[h.r.app.ss] {
			urgent[h.r.app.ss] = true // its later lingering appends go too
			out = append(out, h.r)
		} else {
			keep = append(keep, h)
		}
	}
	linger := c.s.opts.Linger
	if linger == 0 {
		linger = store.LingerMax
	}
	for _, r := range group {
		if linger > 0 && r.lingers() && !urgent[r.app.ss] {
			keep = append(keep, heldReq{r: r, until: now.Add(linger)})
			continue
		}
		out = append(out, r)
	}
	if len(keep) < len(c.held) {
		clear(c.held[len(keep):]) // no reference to the released requests
	}
	c.held = keep
	return out
}

// take adds to group what is queued, without waiting, up to maxGroup.
func (c *committer) take(group []commitReq) []commitReq {
	for len(group) < maxGroup {
		select {
		case r := <-c.in:
			group = append(group, r)
		default:
			return group
		}
	}
	return group
}

// commitGroup commits the batches of group with one fsync and answers each:
// the pipelined appends in it become visible, or their generations are
// lost (pipeline.go).
func (c *committer) commitGroup(group []commitReq) {
	var lowErr error
	for _, r := range group {
		if r.grows {
			lowErr = c.s.checkSpace()
			c.s.low.Store(lowErr != nil)
			break
		}
	}
	gb := c.s.db.NewBatch()
	var members []commitReq
	var p pipelined
	for _, r := range group {
		var err error
		switch {
		case r.app != nil && p.dropped(r.app):
			r.b.Close()
			continue
		case r.grows && lowErr != nil:
			err = lowErr
		default:
			if aerr := gb.Apply(r.b, nil); aerr != nil {
				err = fmt.Errorf("durable store: %w: %v", store.ErrUnavailable, aerr)
			}
		}
		r.b.Close()
		if err != nil {
			c.answer(r, &p, err)
			continue
		}
		p.add(r)
		members = append(members, r)
	}
	var err error
	if len(members) > 0 {
		p.writeMeta(gb)
		c.s.committing.Store(time.Now().UnixNano())
		if hold := c.s.beforeCommit.Load(); hold != nil {
			(*hold)()
		}
		err = gb.Commit(pebble.Sync)
		c.s.committing.Store(0)
		c.s.groups.Add(1)
	}
	gb.Close()
	if err != nil {
		err = fmt.Errorf("durable store: commit: %w: %v", store.ErrUnavailable, err)
	}
	for _, r := range members {
		c.answer(r, &p, err)
	}
	if err == nil {
		c.s.publish(&p)
	}
	p.notify(c.s)
}

// answer reports err (nil: stored) to r's caller, or, for a pipelined
// append that failed, loses its generation.
func (c *committer) answer(r commitReq, p *pipelined, err error) {
	if r.app == nil {
		if r.done != nil {
			r.done <- err
		} else if r.meta != nil {
			r.meta.pend.Release(1, 0) // a trim (log.go, cut)
		}
		return
	}
	if err != nil {
		p.lose(r.app, err)
	}
}

// diskStalled is how long a group commit (a write and an fsync) may take
// before Check reports the disk stalled: Pebble's disk-health check logs
// "disk slow" at the same bound (open.go).
const diskStalled = 5 * time.Second

// Check reports whether the store can take new data, as a readiness
// probe asks: an error wrapping store.ErrUnavailable when the data
// directory is gone or is no longer a directory (every write would fail),
// when a commit has waited on the disk for more than 5 s (a stalled or
// frozen disk: every write waits behind it), and also ErrNoSpace when
// its file system has less than MinFreeBytes free (every write that adds
// data is refused, see Options.MinFreeBytes); nil otherwise. It reads
// the file system only, never the engine, so that it answers while the
// disk does not.
func (s *Store) Check(ctx context.Context) error {
	if err := s.checkDir(); err != nil {
		s.low.Store(true)
		return err
	}
	if since := s.committing.Load(); since != 0 {
		if d := time.Since(time.Unix(0, since)); d > time.Duration(s.stalled.Load()) {
			return fmt.Errorf("durable store: data directory %s: %w: a write to its disk has not finished for %v, and every write waits behind it: "+
				"check the disk (stalled, frozen, or failing); writes go on when it answers", s.dir, store.ErrUnavailable, d.Round(time.Second))
		}
	}
	if err := s.checkSpace(); err != nil {
		s.low.Store(true)
		return err
	}
	return nil
}

// checkDir returns an error wrapping store.ErrUnavailable when the data
// directory is gone or is no longer a directory.
func (s *Store) checkDir() error {
	fi, err := os.Stat(s.dir)
	switch {
	case err != nil:
		return fmt.Errorf("durable store: data directory %s: %w: %v: restore it, or restart with another --data-dir", s.dir, store.ErrUnavailable, err)
	case !fi.IsDir():
		return fmt.Errorf("durable store: data directory %s: %w: no longer a directory: restore it, or restart with another --data-dir", s.dir, store.ErrUnavailable)
	}
	return nil
}

// refusal returns why the store refuses new data now, the cheap checks of
// Check that Append repeats while low is set: the data directory gone, or
// its file system low on space; nil when neither.
func (s *Store) refusal() error {
	if err := s.checkDir(); err != nil {
		return err
	}
	return s.checkSpace()
}

// checkSpace returns an error wrapping store.ErrUnavailable and ErrNoSpace
// when the data directory's file system has less than MinFreeBytes free.
func (s *Store) checkSpace() error {
	if s.opts.MinFreeBytes < 0 {
		return nil
	}
	free, err := freeBytes(s.dir)
	if err != nil {
		return fmt.Errorf("durable store: statfs %s: %w: %v", s.dir, store.ErrUnavailable, err)
	}
	if free < uint64(s.opts.MinFreeBytes) {
		return &noSpaceError{dir: s.dir, free: free, want: s.opts.MinFreeBytes}
	}
	return nil
}

// noSpaceError wraps both store.ErrUnavailable (the caller may retry later,
// the transport answers 503) and ErrNoSpace.
type noSpaceError struct {
	dir  string
	free uint64
	want int64
}

func (e *noSpaceError) Error() string {
	return fmt.Sprintf("durable store: %s: %s: %d bytes free on %s, at least %d kept free", store.ErrUnavailable, ErrNoSpace, e.free, e.dir, e.want)
}

func (e *noSpaceError) Unwrap() []error { return []error{store.ErrUnavailable, ErrNoSpace} }

// freeBytes returns the bytes available to unprivileged users on dir's file
// system.
func freeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
