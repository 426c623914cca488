package durable

import (
	"fmt"
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
	done  chan error
}

// committer commits the batches of all sessions in groups, one fsync per
// group (group commit).
type committer struct {
	s    *Store
	in   chan commitReq
	quit chan struct{}
	done chan struct{}
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
	r := commitReq{b: b, grows: grows, done: make(chan error, 1)}
	select {
	case s.c.in <- r:
	case <-s.c.done:
		b.Close()
		return s.unavailable("commit")
	}
	return <-r.done
}

func (c *committer) stop() {
	close(c.quit)
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	for {
		var first commitReq
		select {
		case first = <-c.in:
		case <-c.quit:
			// Writers hold the store's close lock shared while they wait,
			// so nothing can be queued once Close holds it exclusively.
			return
		}
		group := []commitReq{first}
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
	drain:
		for len(group) < maxGroup {
			select {
			case r := <-c.in:
				group = append(group, r)
			default:
				break drain
			}
		}
		c.commitGroup(group)
	}
}

// commitGroup commits the batches of group with one fsync and answers each.
func (c *committer) commitGroup(group []commitReq) {
	var lowErr error
	for _, r := range group {
		if r.grows {
			lowErr = c.s.checkSpace()
			break
		}
	}
	gb := c.s.db.NewBatch()
	var members []commitReq
	for _, r := range group {
		if r.grows && lowErr != nil {
			r.b.Close()
			r.done <- lowErr
			continue
		}
		if err := gb.Apply(r.b, nil); err != nil {
			r.b.Close()
			r.done <- fmt.Errorf("durable store: %w: %v", store.ErrUnavailable, err)
			continue
		}
		r.b.Close()
		members = append(members, r)
	}
	var err error
	if len(members) > 0 {
		err = gb.Commit(pebble.Sync)
		c.s.groups.Add(1)
	}
	gb.Close()
	if err != nil {
		err = fmt.Errorf("durable store: commit: %w: %v", store.ErrUnavailable, err)
	}
	for _, r := range members {
		r.done <- err
	}
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
