package durable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-mcp/tidemark/store"
)

// sweeper runs Sweep every SweepInterval until Close.
func (s *Store) sweeper() {
	defer close(s.sweepDone)
	if s.opts.SweepInterval < 0 {
		<-s.sweepStop
		return
	}
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.sweepStop:
			return
		case <-t.C:
			if err := s.Sweep(context.Background()); err != nil {
				s.logger.Warn("sweep failed", "error", err)
			}
		}
	}
}

// Sweep ends, as store.EndIdle, the sessions inherited from a previous
// process that have been idle for longer than IdleTTL (see Options), and
// deletes the tombstones and the task records that have expired. The
// sweeper calls it every SweepInterval. It returns the first error met;
// store.ErrUnavailable once the Store is closed.
func (s *Store) Sweep(ctx context.Context) error {
	now := s.opts.Now()
	if s.opts.IdleTTL > 0 {
		cutoff := now.Add(-s.opts.IdleTTL)
		var idle []string
		s.mu.Lock()
		for _, ss := range s.sessions {
			ss.Lock()
			if !s.owners[ss.Rec.Owner] && ss.Rec.LastSeen.Before(cutoff) {
				idle = append(idle, ss.token)
			}
			ss.Unlock()
		}
		// A parked session has no owner; its index entry has its LastSeen.
		if !s.owners[""] {
			for token, p := range s.parked {
				if p.lastSeen < unixNano(cutoff) {
					idle = append(idle, token)
				}
			}
		}
		s.mu.Unlock()
		notify := s.onEnded.Load()
		for _, token := range idle {
			var rec store.Record
			ended := false
			err := s.write("end", token, func(ss *sess) error {
				// Checked again under the write lock: a Claim may have won.
				if s.isOwner(ss.Rec.Owner) || !ss.Rec.LastSeen.Before(cutoff) {
					return nil
				}
				rec = ss.Rec
				rec.State = bytes.Clone(rec.State)
				if err := s.end(ss, store.EndIdle, now.Add(s.opts.TombstoneTTL)); err != nil {
					return err
				}
				ended = true
				return nil
			})
			if errors.Is(err, store.ErrEnded) || errors.Is(err, store.ErrNotFound) {
				continue // ended meanwhile by its owner
			}
			if err != nil {
				return err
			}
			if !ended {
				continue
			}
			s.logger.Info("session ended", "session", store.Prefix(token), "reason", string(store.EndIdle),
				"detail", "inherited from a previous process and idle")
			if notify != nil {
				(*notify)(rec)
			}
		}
	}
	if err := s.dropTombstones(now); err != nil {
		return err
	}
	n, err := s.purgeTasks(now)
	if n > 0 {
		s.logger.Debug("expired tasks deleted", "tasks", n)
	}
	return err
}

// NotifyEnded implements store.EndNotifier: f hears of each session Sweep
// ends (inherited from an earlier process and idle past IdleTTL), on the
// sweeping goroutine.
func (s *Store) NotifyEnded(f func(rec store.Record)) {
	s.onEnded.Store(&f)
}

// isOwner reports whether owner wrote through this Store since Open.
func (s *Store) isOwner(owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners[owner]
}

// dropTombstones deletes the tombstones whose time has passed.
func (s *Store) dropTombstones(now time.Time) error {
	if err := s.shared("sweep"); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindTomb}, UpperBound: []byte{kindTomb + 1}})
	if err != nil {
		return fmt.Errorf("durable store: sweep: %w: %v", store.ErrUnavailable, err)
	}
	b := s.db.NewBatch()
	for it.First(); it.Valid(); it.Next() {
		var t tombJSON
		if json.Unmarshal(it.Value(), &t) == nil && !now.Before(t.Until) {
			b.Delete(append([]byte(nil), it.Key()...), nil)
		}
	}
	it.Close()
	if b.Empty() {
		b.Close()
		return nil
	}
	return s.commit(b, false)
}

// Compact reclaims at once the disk space of deleted events (trimmed,
// claimed away, ended): it flushes the memtable and compacts the whole key
// space. Pebble does this in the background anyway; Compact is for
// operators and benchmarks. It may take seconds on a large directory.
func (s *Store) Compact(ctx context.Context) error {
	if err := s.shared("compact"); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("durable store: compact: flush: %w", err)
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return fmt.Errorf("durable store: compact: %w", err)
	}
	return nil
}

// Usage is the space a Store uses.
type Usage struct {
	// RetainedBytes is the sum of store.Event.Size over every session's
	// retained events: what Options.MaxBytes bounds.
	RetainedBytes int64
	// Sessions is the number of live records.
	Sessions int
	// DirBytes is the size of the files in the data directory (bytes),
	// including files Pebble is about to delete.
	DirBytes int64
	// TableBytes is the part of DirBytes in Pebble's table files (*.sst),
	// where compaction reclaims deleted events; the rest is mostly the
	// write-ahead log, whose files Pebble keeps for reuse (up to about
	// 16 MiB).
	TableBytes int64
}

// Usage returns the space the Store uses now.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	n := len(s.sessions) + len(s.parked)
	s.mu.Unlock()
	u := Usage{RetainedBytes: s.total.Load(), Sessions: n, DirBytes: DirSize(s.dir)}
	tables, _ := filepath.Glob(filepath.Join(s.dir, "*.sst"))
	for _, f := range tables {
		if fi, err := os.Stat(f); err == nil {
			u.TableBytes += fi.Size()
		}
	}
	return u
}

// DirSize returns the total size (bytes) of the regular files under dir.
func DirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
