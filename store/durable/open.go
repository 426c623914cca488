package durable

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/internal/pending"
)

// FormatVersion is the layout version of data directories this build
// writes and reads. A directory of a higher version is refused.
const FormatVersion = 1

// formatFile names the file that holds "tidemark-durable <version>\n".
const formatFile = "FORMAT"

const formatMagic = "tidemark-durable"

// Open opens the data directory dir, creating it (mode 0700) if it does not
// exist, and returns a Store that holds it until Close. Errors, each naming
// dir and what to do: ErrInUse (another process holds it), ErrNewerFormat,
// ErrCorrupt (damaged, or not a Tidemark data directory), ErrNotWritable,
// ErrNoSpace (less free space than opts.MinFreeBytes).
func Open(dir string, opts Options) (*Store, error) {
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = DefaultMinFreeBytes
	}
	if opts.IdleTTL == 0 {
		opts.IdleTTL = DefaultIdleTTL
	}
	if opts.TombstoneTTL <= 0 {
		opts.TombstoneTTL = DefaultTombstoneTTL
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("durable store: data directory %s: %w", dir, err)
	}
	dir = abs
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, createErr(dir, err)
	}
	lockPath := filepath.Join(dir, "LOCK")
	_, statErr := os.Stat(lockPath)
	hadLock := statErr == nil
	lock, err := pebble.LockDirectory(dir, vfs.Default)
	if err != nil {
		return nil, openErr(dir, "lock", err)
	}
	s, err := open(dir, lock, opts)
	if err != nil {
		lock.Close()
		// A refused directory is left as it was: the lock file this Open
		// made goes, unless a store was laid out (TestBadDirectory).
		if _, ferr := os.Stat(filepath.Join(dir, formatFile)); !hadLock && errors.Is(ferr, fs.ErrNotExist) {
			os.Remove(lockPath)
		}
		return nil, err
	}
	return s, nil
}

func open(dir string, lock *pebble.Lock, opts Options) (*Store, error) {
	fresh, err := checkFormat(dir)
	if err != nil {
		return nil, err
	}
	if opts.MinFreeBytes > 0 {
		free, err := freeBytes(dir)
		if err != nil {
			return nil, openErr(dir, "statfs", err)
		}
		if free < uint64(opts.MinFreeBytes) {
			return nil, fmt.Errorf("durable store: data directory %s: %w: %d bytes free, %d needed: free space on its file system or choose another --data-dir",
				dir, ErrNoSpace, free, opts.MinFreeBytes)
		}
	}
	if fresh {
		if err := writeFormat(dir); err != nil {
			return nil, openErr(dir, "write "+formatFile, err)
		}
	}
	logger := opts.Logger.With("store", "durable", "dir", dir)
	// The disk-health checking wrapper Pebble would add itself, made here
	// so that it is closed when Open fails too (Pebble leaks its goroutine
	// then).
	fsys, fsCloser := vfs.WithDiskHealthChecks(vfs.Default, diskStalled, nil, func(info vfs.DiskSlowInfo) {
		logger.Warn("disk slow", "file", info.Path, "op", info.OpType.String(), "duration", info.Duration)
	})
	popts := &pebble.Options{
		FS:                 fsys,
		Lock:               lock,
		ErrorIfNotExists:   !fresh,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{logger},
	}
	// A table block ends before any entry that would take it past its 4
	// KiB target (Pebble's default lets a block that is under 90 % of it
	// take one more): a large event then gets a block of its own, so a read
	// of the small events next to it does not decompress it (levels below
	// L0 inherit the setting).
	popts.Levels[0].BlockSizeThreshold = 1
	db, err := pebble.Open(dir, popts)
	if err == nil && fresh {
		// Pebble writes the first log of a new directory before it raises
		// the directory to FormatNewest, so that log lacks the synced
		// offsets (FormatWALSyncChunks) by which a later Open tells a
		// damaged log from a torn tail and refuses it; opened once more,
		// the directory writes only logs that have them.
		if err = db.Close(); err == nil {
			popts.ErrorIfNotExists = true
			db, err = pebble.Open(dir, popts)
		}
	}
	if err != nil {
		fsCloser.Close()
		return nil, openErr(dir, "open", err)
	}
	s := &Store{
		dir: dir, opts: opts, logger: logger, db: db, lock: lock, fsCloser: fsCloser,
		closing:    make(chan struct{}),
		sessions:   make(map[string]*sess),
		parked:     make(map[string]*parkedSess),
		owners:     make(map[string]bool),
		sweepStop:  make(chan struct{}),
		sweepDone:  make(chan struct{}),
		pendLimits: pending.Limits{Events: opts.MaxPendingEvents, Bytes: opts.MaxPendingBytes}.OrDefault(),
	}
	s.stalled.Store(int64(diskStalled))
	if err := s.load(); err != nil {
		db.Close()
		fsCloser.Close()
		return nil, fmt.Errorf("durable store: data directory %s: %w: %v: restore it from a backup, or move it away to start with no sessions", dir, ErrCorrupt, err)
	}
	s.c = newCommitter(s)
	go s.sweeper()
	logger.Info("durable store opened", "sessions", len(s.sessions)+len(s.parked), "parked", len(s.parked), "retained_bytes", s.total.Load(), "fresh", fresh)
	return s, nil
}

// checkFormat reads the FORMAT file. It reports fresh when the directory
// holds nothing but the lock file, so a new store may be laid out in it.
func checkFormat(dir string) (fresh bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, formatFile))
	if errors.Is(err, fs.ErrNotExist) {
		entries, rerr := os.ReadDir(dir)
		if rerr != nil {
			return false, openErr(dir, "read", rerr)
		}
		for _, e := range entries {
			if e.Name() != "LOCK" {
				return false, fmt.Errorf("durable store: data directory %s: %w: it has files (%s) but no %s file: choose an empty or new directory",
					dir, ErrForeign, e.Name(), formatFile)
			}
		}
		return true, nil
	}
	if err != nil {
		return false, openErr(dir, "read "+formatFile, err)
	}
	magic, ver, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), " ")
	n, perr := strconv.Atoi(ver)
	if !ok || magic != formatMagic || perr != nil || n < 1 || !bytes.HasSuffix(b, []byte("\n")) {
		return false, fmt.Errorf("durable store: data directory %s: %w: %s holds %q, want %q: restore the directory from a backup, or move it away to start with no sessions",
			dir, ErrCorrupt, formatFile, b, fmt.Sprintf("%s %d\n", formatMagic, FormatVersion))
	}
	if n > FormatVersion {
		return false, fmt.Errorf("durable store: data directory %s: %w: format %d, this build reads format %d: run a newer tidemark, or choose another --data-dir",
			dir, ErrNewerFormat, n, FormatVersion)
	}
	return false, nil
}

// writeFormat writes the FORMAT file durably: a temporary file, fsync,
// rename, fsync of the directory.
func writeFormat(dir string) error {
	tmp := filepath.Join(dir, formatFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %d\n", formatMagic, FormatVersion)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, formatFile))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// createErr returns the error of a data directory that cannot be created.
// Nothing of it existed, so nothing is damaged: a missing parent (a path
// under /proc fails with ENOENT) is ErrNotWritable saying so; every other
// cause is classified as openErr does (a parent that is a file, no space,
// no permission).
func createErr(dir string, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return openErr(dir, "create", err)
	}
	return fmt.Errorf("durable store: data directory %s: %w: it cannot be created: %v: create it (writable by the tidemark user) on a writable file system, or choose another --data-dir", dir, ErrNotWritable, err)
}

// openErr classifies an error met while opening dir.
func openErr(dir, step string, err error) error {
	switch {
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), strings.Contains(err.Error(), "lock held by current process"):
		return fmt.Errorf("durable store: data directory %s: %w: another tidemark process holds its lock (%v): stop that process, or choose another --data-dir", dir, ErrInUse, err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("durable store: data directory %s: %w: %s: %v: give the tidemark user write permission on it (and a writable file system), or choose another --data-dir", dir, ErrNotWritable, step, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("durable store: data directory %s: %w: %s: %v: free space on its file system, or choose another --data-dir", dir, ErrNoSpace, step, err)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("durable store: data directory %s: %w: %s: %v: it (or a parent) is a file, not a directory: give --data-dir a directory path", dir, ErrNotWritable, step, err)
	case step == "lock" && errors.Is(err, fs.ErrNotExist):
		// The directory exists (Open made it), yet its lock file cannot be
		// created in it: a file system such as /proc or /sys, not damage.
		return fmt.Errorf("durable store: data directory %s: %w: %s: %v: no file can be created in it: give --data-dir a directory on a writable file system", dir, ErrNotWritable, step, err)
	case pebble.IsCorruptionError(err), errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("durable store: data directory %s: %w: %s: %v: restore it from a backup, or move it away to start with no sessions", dir, ErrCorrupt, step, err)
	default:
		// Pebble reports most damage (a truncated manifest, table or log
		// file) as errors of its own kinds; anything it could not open is
		// treated as damage, with its message.
		return fmt.Errorf("durable store: data directory %s: %w: %s: %v: restore it from a backup, or move it away to start with no sessions", dir, ErrCorrupt, step, err)
	}
}

// load reads every record and log meta, and keeps in memory those of the
// sessions that are not hibernated (park.go).
func (s *Store) load() error {
	recs, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindRecord}, UpperBound: []byte{kindRecord + 1}})
	if err != nil {
		return err
	}
	for recs.First(); recs.Valid(); recs.Next() {
		token, err := tokenOf(recs.Key())
		if err != nil {
			recs.Close()
			return err
		}
		rec, err := decodeRecord(token, recs.Value())
		if err != nil {
			recs.Close()
			return err
		}
		s.sessions[token] = newSess(rec, 0)
	}
	if err := recs.Close(); err != nil {
		return err
	}
	var total int64
	for token, ss := range s.sessions {
		v, closer, err := s.db.Get(tokenKey(kindMeta, token))
		if err != nil {
			return fmt.Errorf("log meta of session %s: %w", store.Prefix(token), err)
		}
		m, err := decodeMeta(v)
		closer.Close()
		if err != nil {
			return fmt.Errorf("session %s: %w", store.Prefix(token), err)
		}
		if err := m.checkCount(); err != nil {
			// A count, unlike the events, can be rebuilt: the session
			// is kept, with its events counted again, rather than the
			// whole directory refused.
			bad := m.bytes
			if m.bytes, err = s.countBytes(token, m); err != nil {
				return fmt.Errorf("session %s: counting the bytes of events %d to %d: %w", store.Prefix(token), m.floor, m.hwm, err)
			}
			s.logger.Warn("durable store: a session's byte count was inconsistent; counted again from its events",
				"session", store.Prefix(token), "floor", m.floor, "hwm", m.hwm, "bytes_stored", bad, "bytes_counted", m.bytes,
				"reason", replay.ReasonStoreError)
		}
		ss.Floor, ss.HWM, ss.Bytes, ss.Oldest = m.floor, m.hwm, m.bytes, m.oldest
		total += m.bytes
		s.requeue(ss)
		// The last event must be there: a missing one means lost data.
		if m.hwm >= m.floor {
			v, closer, err := s.db.Get(eventKey(token, m.hwm))
			if err != nil {
				return fmt.Errorf("session %s: event %d (its high-water mark): %w", store.Prefix(token), m.hwm, err)
			}
			closer.Close()
			if len(v) < eventHeaderLen {
				return fmt.Errorf("session %s: event %d: %w", store.Prefix(token), m.hwm, errShortEvent)
			}
		}
		s.parkAtOpen(token, ss)
	}
	s.total.Store(total)
	return nil
}

// countBytes returns the store.Event.Size total of token's events from
// m.floor to m.hwm as stored.
func (s *Store) countBytes(token string, m meta) (int64, error) {
	if m.hwm < m.floor {
		return 0, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(token, m.floor), UpperBound: eventKey(token, m.hwm+1)})
	if err != nil {
		return 0, err
	}
	var n int64
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return 0, err
		}
		n += eventSize(v)
	}
	return n, it.Close()
}

// Close stops the sweeper and the committer, waits for the writes in
// flight, and closes the engine and the directory lock. Later calls fail
// with store.ErrUnavailable. Close is idempotent.
func (s *Store) Close() error {
	s.rw.Lock()
	defer s.rw.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.closing)
	close(s.sweepStop)
	<-s.sweepDone
	s.c.stop()
	err := s.db.Close()
	s.fsCloser.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("durable store: close %s: %w", s.dir, err)
	}
	s.logger.Info("durable store closed")
	return nil
}

// Dir returns the absolute path of the data directory.
func (s *Store) Dir() string { return s.dir }

// pebbleLogger sends Pebble's messages to slog. Pebble calls Fatalf when it
// cannot go on (a failed write-ahead log write); it must not return, so the
// process stops as Pebble's own logger would make it, after logging.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "source", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "source", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "source", "pebble", "reason", replay.ReasonFatal)
	panic("durable store: " + msg)
}

// unavailable returns the error of a call on a closed Store.
func (s *Store) unavailable(op string) error {
	return fmt.Errorf("durable store: %s: %w: closed", op, store.ErrUnavailable)
}

// shared takes the close lock shared; it fails once the Store is closed.
func (s *Store) shared(op string) error {
	s.rw.RLock()
	if s.closed {
		s.rw.RUnlock()
		return s.unavailable(op)
	}
	return nil
}
