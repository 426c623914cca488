// Package durable is Tidemark's single-machine store that outlives the
// process: session records, tombstones and event logs in one data
// directory, on the Pebble v2 embedded key-value engine
// (github.com/cockroachdb/pebble/v2). Its durability promise is "survives
// kill -9": every call that changes what a client can observe returns only
// after its write is fsync'd.
//
// # Why Pebble
//
// Chosen by measurement against bbolt and SQLite (modernc.org/sqlite) on the
// store's own workload: group-committed durable appends with 8 and 64
// writers, deleting a range of events, reclaiming the space of deleted
// events online, and replaying 10,000 events. The program is in the
// enginecmp directory next to this file (a module of its own, so the other
// engines stay out of Tidemark's dependencies); its figures are in
// bench/NOTES.md ("2026-11-30: the embedded engine of the durable store"). Pebble deletes a range
// in one operation where the others delete row by row, and it shrinks its
// files while open, where bbolt never does.
//
// # Durability and group commit
//
// Every write (Append, Create, Claim, Renew, SaveState, Hibernate, Touch,
// Trim, End) is one atomic Pebble batch handed to a single committer
// goroutine, which
// commits the batches waiting for it together with one fsync (group commit
// across all sessions and streams). Append is pipelined: it assigns the
// sequences, queues the events and returns, so a producer never waits for
// an fsync, and the events of many Appends share the next one while
// producers append into the group after it. Each session's durable
// watermark (its image's HWM) moves only after that fsync, and Read and
// Wait never pass it, so no connection can send an event, and no client
// can hold a cursor, above the durable high-water mark. The other writes
// return once their fsync is done; Claim and End first wait for the
// session's queued events. Wake alone returns once its batch is in
// Pebble's write-ahead log, before an fsync: the next synced write makes
// it durable, and until then a crash leaves the session hibernated as the
// wake found it (Store.Wake has the argument). A session may have at most
// Options.MaxPendingEvents and MaxPendingBytes queued; an Append beyond
// them waits (back-pressure). A group that cannot be stored (the file
// system low on space) loses the generations of the sessions whose events
// it held (store.ErrLost): those events are never visible, the later
// Appends of those generations fail, their Waits return the
// *store.LostError, and the LossNotifier hears of it; Claim starts the
// next generation. Options.CommitWindow trades latency for fewer fsyncs.
//
// # Fencing
//
// Each session has a write lock held across the check of the generation and
// the commit of the write, so a write carrying a stale generation stores
// nothing (store.ErrFenced), and no write of an older generation can land
// after a Claim.
//
// # Hibernated sessions
//
// A session whose record has no owner (hibernated, store.Sessions.Hibernate)
// is parked: its record and log meta live in Pebble only, and the Store
// keeps an index entry of it (its token, when it was last used, and its
// place in the bound's queue: about a hundred bytes), so that a process
// holds any number of hibernated sessions at the cost of their disk
// space. The first call that names it reads it back; a write that leaves
// it with no owner parks it again (park.go).
//
// # Restart
//
// Open needs no recovery step of its own: a record says which process owns
// its live state (store.Record.Owner, a boot ID), so session.Registry
// re-creates a session owned by a previous process at generation+1, through
// Claim, on the first request that needs it. Tombstones, replay floors and
// high-water marks are read back as they were committed.
//
// # Space
//
// Retention per session is applied by eventlog through Trim, as with the
// memory store. On top of it the store bounds the data directory
// (Options.MaxBytes) and refuses to grow when the file system runs low
// (Options.MinFreeBytes), so that the engine never meets a full disk; see
// the Options fields. Deleted events are reclaimed by Pebble's background
// compactions, and at once by Compact.
//
// # Tasks
//
// The store keeps the task records of the Tasks extension (store.Tasks) in
// the directory only, never in memory: a task is read from Pebble by its ID
// when a client asks for it, so the store holds any number of tasks at the
// cost of their disk space. Each write is the revision check and one batch
// (the record and its expiry index keys; codec.go has the layout) under
// the lock of the task's stripe, and returns once the committer has
// fsync'd it; reads take the same lock, so a task a client is shown
// survives kill -9 (DESIGN.md, "Tasks: the executor rule"). The sweeper
// deletes the expired records through the expiry index.
//
// # The data directory
//
// One process at a time: Open takes a file lock on the directory and a
// second Open fails with ErrInUse. The directory holds a FORMAT file naming
// the layout version; a directory of a newer version fails with
// ErrNewerFormat, a damaged one with ErrCorrupt, one with files but no
// FORMAT file with ErrForeign (and no file added), one that cannot be written
// with ErrNotWritable, and a full file system with ErrNoSpace. Each message
// names the directory and what to do.
package durable

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-mcp/tidemark/internal/agequeue"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/internal/image"
	"github.com/tidemark-mcp/tidemark/store/internal/pending"
)

// Defaults of Options.
const (
	// DefaultMaxBytes is the default bound on retained event bytes: 1 GiB.
	DefaultMaxBytes = 1 << 30
	// DefaultMinFreeBytes is the default free space the store leaves on the
	// file system: 128 MiB.
	DefaultMinFreeBytes = 128 << 20
	// DefaultIdleTTL matches session.DefaultIdleTTL: 30 minutes.
	DefaultIdleTTL = 30 * time.Minute
	// DefaultTombstoneTTL matches session.DefaultTombstoneTTL: 24 hours.
	DefaultTombstoneTTL = 24 * time.Hour
	// DefaultSweepInterval is how often the sweeper runs: 1 minute.
	DefaultSweepInterval = time.Minute
)

// Errors of Open; test with errors.Is. Each is wrapped with the directory
// and the advice to act on.
var (
	// ErrInUse: another process (or another Store in this process) has the
	// data directory open.
	ErrInUse = errors.New("data directory in use")
	// ErrNewerFormat: the directory was written by a newer Tidemark whose
	// layout this build cannot read.
	ErrNewerFormat = errors.New("data directory has a newer format")
	// ErrCorrupt: the directory's files are damaged (truncated, overwritten).
	ErrCorrupt = errors.New("data directory is damaged")
	// ErrForeign: the directory holds files but no FORMAT file: it is not
	// a Tidemark data directory, and Open leaves it alone.
	ErrForeign = errors.New("not a Tidemark data directory")
	// ErrNotWritable: the directory or its files cannot be written
	// (permissions, read-only file system).
	ErrNotWritable = errors.New("data directory is not writable")
	// ErrNoSpace: the file system has less free space than
	// Options.MinFreeBytes. Appends fail with it too, wrapped together
	// with store.ErrUnavailable.
	ErrNoSpace = errors.New("no space left for the data directory")
)

// Options configures Open. The zero value selects every default.
type Options struct {
	// CommitWindow is how long the committer waits, after the first write
	// of a group arrives, for more writes to share the group's fsync.
	// Default 0: no waiting; writes that arrive while an fsync is in flight
	// share the next one, which already groups concurrent sessions. Latency
	// cost: every write waits for one fsync of the disk (bench/NOTES.md has
	// the figures of one machine) plus up to CommitWindow; a positive
	// window lowers the fsync rate when writes trickle in, at that price on
	// each write.
	CommitWindow time.Duration
	// MaxBytes bounds the event bytes (store.Event.Size) retained across
	// all sessions, the bulk of the data directory. Over it, the oldest
	// events of the store go first (their sessions' replay floors rise,
	// as with eventlog's budget), until the total is MaxBytes less a
	// sixteenth, except each session's newest event: when the newest events
	// alone exceed MaxBytes, the directory stays over it until sessions end
	// (see enforceBound). The directory on disk holds these bytes
	// compressed, plus records and tombstones (about 1 KiB per session),
	// task records (each the size of its call's params and result, kept
	// until its TTL ends and not counted here), the write-ahead log (Pebble
	// keeps up to three 4 MiB log files for reuse: about 16 MiB) and
	// deleted data that compaction has not yet reclaimed. Default 1 GiB;
	// negative: no bound.
	MaxBytes int64
	// MinFreeBytes is the free space (bytes) the store keeps on the data
	// directory's file system: a write that adds data fails with
	// store.ErrUnavailable and ErrNoSpace while less is free, so the engine
	// never meets a full disk (Pebble cannot recover from a failed log
	// write without a restart) and compactions have room. Writes that only
	// remove data (Trim, End) still go through; Claim is refused too, as
	// the new generation could store nothing, so the session keeps its
	// generation until space is back. Default 128 MiB;
	// negative: no check.
	MinFreeBytes int64
	// IdleTTL ends, as store.EndIdle, the sessions inherited from a previous
	// process (their Owner never wrote to this Store) whose LastSeen is
	// older than IdleTTL: nobody came back for them, and session.Registry
	// would end them on the next request anyway. Sessions owned by a
	// process using this Store are left to its Registry. Default 30 minutes
	// (session.DefaultIdleTTL); negative: never.
	IdleTTL time.Duration
	// TombstoneTTL is how long a tombstone written by the sweeper lasts.
	// Default 24 hours (session.DefaultTombstoneTTL).
	TombstoneTTL time.Duration
	// SweepInterval is how often expired tombstones are deleted and idle
	// inherited sessions ended. Default 1 minute; negative: never (tests).
	SweepInterval time.Duration
	// Linger is how long the committer holds back an append whose events
	// all linger (store.Event.Linger: a POST stream's opening event) for
	// the session's next append, so that both share one fsync. Default
	// (zero) store.LingerMax, 2 ms; negative: never held back.
	Linger time.Duration
	// MaxPendingEvents bounds the events of one session that Append has
	// accepted and the committer not yet stored; an Append beyond it
	// waits (back-pressure), so a tool that floods faster than the disk
	// syncs holds bounded memory. Default (zero) 4096 events.
	MaxPendingEvents int
	// MaxPendingBytes bounds the bytes (store.Event.Size) of those
	// events in the same way. Default (zero) 4 MiB.
	MaxPendingBytes int64
	// Logger receives the engine's and the sweeper's messages. Default:
	// slog.Default().
	Logger *slog.Logger
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Store is a store.Store in a data directory. It is safe for concurrent use.
type Store struct {
	dir    string
	opts   Options
	logger *slog.Logger
	db     *pebble.DB
	lock   *pebble.Lock
	c      *committer
	// fsCloser stops the disk-health checker of the engine's file system.
	fsCloser io.Closer

	// rw is held shared by every call that touches db and exclusively by
	// Close, because Pebble panics on a closed DB.
	rw      sync.RWMutex
	closed  bool
	closing chan struct{} // closed by Close: wakes Waits

	mu sync.Mutex
	// sessions are the records held in memory: every session that is not
	// parked. parked are the others, hibernated (no owner) and in Pebble
	// only (park.go); a token is in one of the two while its record lives.
	sessions map[string]*sess
	heldMax  int // the most entries sessions has held since it was made (park.go)
	parked   map[string]*parkedSess
	owners   map[string]bool // owners that wrote to this Store since Open

	total atomic.Int64 // retained event bytes across sessions
	// publishing is held by publish for a whole group, so that Sync, once
	// its events are released, waits for the rest of their publication
	// (the total and the bound's queue) before it applies the bound.
	publishing sync.Mutex
	groups     atomic.Int64 // group commits (fsyncs) so far, for tests
	// committing is when the group commit in progress began, in Unix
	// nanoseconds; 0 while none is. Check reads it: a commit the disk has
	// not finished for stalled means every write waits.
	committing atomic.Int64
	// stalled is how long, in nanoseconds, a commit may take before Check
	// reports the disk stalled (diskStalled; tests shorten it);
	// beforeCommit, when set, runs before each group commit (tests hold
	// one there).
	stalled      atomic.Int64
	beforeCommit atomic.Pointer[func()]
	// low is set while the last group that added data, or the last
	// Check, found the store refusing new data (its file system low on
	// space, or its directory gone): Append then checks again itself
	// (refusal) and fails at once, losing nothing, instead of accepting
	// events whose group would fail and lose their generation.
	low   atomic.Bool
	bound bound // the sessions MaxBytes trims first, and its reports

	sweepStop chan struct{}
	sweepDone chan struct{}

	// taskLocks serialize the writes of each task (tasks.go, taskLock),
	// held from the revision check to the end of the commit.
	taskLocks [taskStripes]sync.Mutex

	pendLimits pending.Limits                                            // Options.MaxPending*
	onLost     atomic.Pointer[func(token string, gen uint64, err error)] // see NotifyLost
	onEnded    atomic.Pointer[func(rec store.Record)]                    // see NotifyEnded
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.LossNotifier = (*Store)(nil)
	_ store.EndNotifier  = (*Store)(nil)
)

// sess is one live session: its image (record and log bounds) exactly as
// last committed (Trim raises the floor first), its write lock, and the
// events appended and not yet stored.
type sess struct {
	image.Image
	token string
	// next is the highest sequence assigned while it is above the image's
	// HWM (events wait for the committer, or were lost); guarded by wmu
	// and by the image's lock.
	next uint64
	// nextOldest is the Time of the first event queued into an empty log
	// (Append's bounds report it before the committer does).
	nextOldest time.Time
	pend       pending.Count
	age        *agequeue.Item[string] // the token, in Store.bound.q while it holds 2 events or more
	// wmu serializes the writes of the session, held from the fencing check
	// to the end of the commit.
	wmu sync.Mutex
}

// newSess returns the session whose record is rec, with an empty log at
// floor.
func newSess(rec store.Record, floor uint64) *sess {
	ss := &sess{Image: image.Image{Rec: rec, Floor: floor}, token: rec.Token}
	ss.age = agequeue.NewItem(rec.Token)
	return ss
}

func (ss *sess) metaLocked() meta {
	return meta{floor: ss.Floor, hwm: ss.HWM, bytes: ss.Bytes, oldest: ss.Oldest}
}
