// Package store defines what Tidemark keeps about sessions and their event
// logs, and the guarantees every backend gives: ordering, durability and
// fencing. Backends live in sub-packages: memory (the default), and stores
// that outlive the process. The storetest package checks any backend against
// the contract written here.
//
// The generation of a session record is its fencing token (DESIGN.md,
// "Generations"): every write that belongs to one incarnation of a session's
// live state carries that incarnation's generation, and the store refuses it,
// atomically with the write, once the record has moved on.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// Sentinel errors. Backends wrap them with the values that explain the
// failure; callers test with errors.Is.
var (
	// ErrNotFound: no record and no tombstone for the token.
	ErrNotFound = errors.New("session not found")
	// ErrEnded: the token has a tombstone (evicted or superseded). The
	// returned error is an *EndedError.
	ErrEnded = errors.New("session ended")
	// ErrExists: Create was given a token the store already knows, live or
	// tombstoned. Tokens are never reissued.
	ErrExists = errors.New("session token already exists")
	// ErrFenced: the write carried a generation other than the record's
	// current one: a newer owner has taken the session over. The returned
	// error is a *FencedError.
	ErrFenced = errors.New("fenced by a newer generation")
	// ErrUnavailable: the backend cannot be reached or cannot write now (disk
	// full, connection lost). Nothing of the failed call was stored; the
	// caller may retry later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrLogLost: the session's record says events from its floor to its
	// HWM are retained, but its log does not hold them: the log was
	// removed outside the store (deleted by hand, or evicted by Redis
	// under a maxmemory-policy other than noeviction). The events cannot
	// come back; a read that meets the gap fails with it.
	ErrLogLost = errors.New("event log lost")
	// ErrLost: events of the session's current generation were accepted
	// by Append (their sequences assigned) and then could not be stored,
	// or their write's outcome is unknown (Redis went away after the
	// write was sent: it may hold them, but no reader will ever see them).
	// That generation is over: it can store nothing more, and only a
	// Claim of the next generation (or End) leaves it. The returned error
	// is a *LostError.
	ErrLost = errors.New("generation lost: accepted events were not stored, or not confirmed stored")
)

// LostError is returned, wrapping ErrLost and the error that kept the
// events from being stored (which wraps ErrUnavailable or ErrFenced), by
// every later Append and Wait of a generation whose events could not be
// stored.
type LostError struct {
	Token      string
	Generation uint64
	// Seq is the lowest sequence that was assigned and not stored.
	Seq uint64
	// Err is why the events were not stored or not confirmed stored.
	Err error
}

// Error names the session by its token prefix, the generation and the
// first sequence lost, and says why.
func (e *LostError) Error() string {
	return fmt.Sprintf("session %s gen %d: %s from sequence %d: %v", Prefix(e.Token), e.Generation, ErrLost, e.Seq, e.Err)
}

// Unwrap returns ErrLost and the cause.
func (e *LostError) Unwrap() []error { return []error{ErrLost, e.Err} }

// EndedError is returned, wrapping ErrEnded, for a token with a tombstone.
type EndedError struct {
	Token  string
	Reason EndReason
	// UserID is the user the ended session belonged to (Record.UserID),
	// kept with the tombstone so that a request by another user can be
	// answered as for a token that never existed; empty when
	// unauthenticated.
	UserID string
}

// Error names the session by its token prefix and says why it ended.
func (e *EndedError) Error() string {
	return fmt.Sprintf("session %s: %s: %s", Prefix(e.Token), ErrEnded, e.Reason)
}

// Unwrap returns ErrEnded.
func (e *EndedError) Unwrap() error { return ErrEnded }

// FencedError is returned, wrapping ErrFenced, when a write carries a stale
// generation.
type FencedError struct {
	Token string
	Op    string // the refused operation: "append", "claim", "renew", "save state", "trim", "hibernate", "wake"
	Have  uint64 // generation the write carried
	Want  uint64 // the record's current generation
}

// Error names the refused operation, the session by its token prefix, the
// generation the write carried and the record's.
func (e *FencedError) Error() string {
	return fmt.Sprintf("%s session %s gen %d: %s (gen %d)", e.Op, Prefix(e.Token), e.Have, ErrFenced, e.Want)
}

// Unwrap returns ErrFenced.
func (e *FencedError) Unwrap() error { return ErrFenced }

// Prefix returns the first 8 bytes of a session token, the form in which
// tokens appear in logs and errors (never the whole token): redact.Token.
func Prefix(token string) string { return redact.Token(token) }

// EndReason says why a session ended.
type EndReason string

// The reasons are words of the catalogue in package replay (reason.go).
const (
	// EndDeleted: the client sent DELETE.
	EndDeleted = EndReason(replay.ReasonDeleted)
	// EndIdle: no request for the idle TTL.
	EndIdle = EndReason(replay.ReasonIdle)
	// EndCapacity: evicted, least recently used, to make room for a new session.
	EndCapacity = EndReason(replay.ReasonCapacity)
	// EndSuperseded: replaced by a newer session.
	EndSuperseded = EndReason(replay.ReasonSuperseded)
	// EndShutdown: the server shut down with a store that does not outlive it.
	EndShutdown = EndReason(replay.ReasonShutdown)
	// EndInitializeFailed: the session's initialize was answered with an
	// error, so the session never began (MCP 2025-11-25, lifecycle: the
	// initialization phase must succeed first).
	EndInitializeFailed = EndReason(replay.ReasonInitializeFailed)
	// EndRetentionBudget: evicted because its newest event was the oldest
	// event left when the events of all sessions exceeded the process's
	// retention budget (eventlog.Options.Budget).
	EndRetentionBudget = EndReason(replay.ReasonRetentionBudget)
)

// Record is the stored part of a session.
type Record struct {
	// Token is the session token (Mcp-Session-Id).
	Token string
	// Generation identifies the current incarnation of the session's live
	// state and is the fencing token of its owner. It starts at 1.
	Generation uint64
	// Owner identifies the process or replica that holds the live state of
	// Generation; empty when nobody does.
	Owner string
	// LeaseUntil is when the owner's claim lapses unless renewed; zero means
	// the claim lasts as long as the owner process.
	LeaseUntil time.Time
	// UserID binds the session to the authenticated user that created it
	// (go-sdk auth.TokenInfo.UserID); empty when unauthenticated.
	UserID string
	// State is the engine-neutral session state (JSON), saved so that a new
	// generation can be re-created without a new initialize. Opaque to stores.
	State []byte
	// Created is when the session was created.
	Created time.Time
	// LastSeen is the time of the latest request recorded by Touch.
	LastSeen time.Time
	// Openings are the opening events' Data of the current generation's
	// streams whose opening event retention removed before their end
	// (Openings), and the mark of those whose Data it did not keep
	// (Openings.Dropped): Trim and a backend's own bound update them in the
	// same atomic step as the removal, Claim empties them, every other
	// write keeps them; Create ignores them.
	Openings Openings
}

// Kind is the kind of an event.
type Kind uint8

const (
	// KindMessage is a JSON-RPC message; Data holds it.
	KindMessage Kind = iota
	// KindPriming is a priming event: an id and empty data, sent first on a
	// new stream (MCP 2025-11-25, basic/transports).
	KindPriming
	// KindClose records that the server closed the stream (SEP-1699); Retry
	// is the reconnection delay to send. A reader writes it and closes.
	KindClose
)

// NewStream is the Stream value of an event that opens a new stream: Append
// sets such an event's Stream to its own Seq. A stream's number is thus the
// sequence of its opening event, unique within the session without any
// counter to coordinate between processes.
const NewStream = ^uint64(0)

// Event is one entry of a session's event log.
type Event struct {
	// Seq is the session-wide sequence, assigned by Append: HWM+1, HWM+2, …
	Seq uint64
	// Generation is the generation the event was emitted in, set by Append
	// to the generation the append carried.
	Generation uint64
	// Stream is the stream the event belongs to: 0 for the standalone GET
	// stream, else the Seq of the stream's opening event (see NewStream).
	Stream uint64
	// Kind says what the event is.
	Kind Kind
	// End marks the last event of its stream: a reader closes after it.
	End bool
	// Retry is the SSE reconnection delay to send with the event; zero: none.
	Retry time.Duration
	// Time is when the event was emitted (set by the caller of Append); it
	// drives retention by age.
	Time time.Time
	// Data is the JSON-RPC message of a KindMessage event. Stores and readers
	// must not modify it after Append.
	Data []byte
	// Linger tells a pipelined store that no connection waits for this
	// event alone: it may hold the event back, for at most LingerMax (2 ms),
	// so that it is stored in one commit with the session's next append,
	// which follows it soon (a POST stream's opening event is followed by
	// its call's answer). It changes when the event is stored, never its
	// order or what is stored; Read does not report it.
	Linger bool
}

// LingerMax is the longest a store holds back an event whose Event.Linger is
// set before it stores it without the append that should follow: short
// next to a call that has work to do, and long enough for a fast call's
// answer to be appended (a few hundred microseconds on a loaded machine).
const LingerMax = 2 * time.Millisecond

// Size returns the number of bytes an event counts for in retention limits:
// its Data plus a fixed 64-byte overhead for the other fields.
func (e *Event) Size() int64 { return int64(len(e.Data)) + 64 }

// Bounds describes a session's event log in its current generation.
type Bounds struct {
	// Generation is the record's current generation.
	Generation uint64
	// Floor is the replay floor: the lowest retained sequence of the current
	// generation. Every event from Floor to HWM is retained. When the
	// generation has no event, Floor = HWM+1.
	Floor uint64
	// HWM is the high-water mark: the highest sequence ever assigned in the
	// session (0 before the first event). Sequences continue across
	// generations, so no cursor of an older generation can name an event of
	// a newer one.
	HWM uint64
	// Events is the number of retained events (HWM - Floor + 1, or 0).
	Events int
	// Bytes is the sum of Size over the retained events.
	Bytes int64
	// Oldest is the Time of the event at Floor; zero when there is none.
	Oldest time.Time
}

// Sessions keeps session records and tombstones.
//
// Guarantees every implementation gives:
//   - Linearizable per token: each call takes effect atomically at one point
//     between its start and its return, and every later call sees it.
//   - Durability: once a call returns nil, its effect is as durable as the
//     backend promises (memory: the process's lifetime; embedded: survives
//     kill -9; Redis: what Redis acknowledged).
//   - Fencing: Claim, Renew, SaveState, Hibernate and Wake compare the generation they carry
//     with the record's inside the same atomic step as their write.
//   - Expiry: a backend may forget a session that no call has written for
//     longer than its documented idle bound (store/redis: Options.IdleTTL
//     and its margins). Its record and its log then go together, as seen
//     by every read (never the record without its log), no tombstone is
//     left, and every later call for the token fails with ErrNotFound.
type Sessions interface {
	// Create stores a new record. It fails with ErrExists if the token is
	// known, live or tombstoned.
	Create(ctx context.Context, rec Record) error

	// Get returns the record of token. It fails with ErrNotFound, or with an
	// *EndedError for a tombstone.
	Get(ctx context.Context, token string) (Record, error)

	// Claim makes owner the owner of a new generation, from+1, holding it
	// until leaseUntil (zero: no expiry), if and only if the record's
	// generation is still from. It discards the events of older
	// generations, so the new generation's Floor is HWM+1. It fails with a
	// *FencedError if the generation has moved, and with ErrNotFound or an
	// *EndedError if the session is gone.
	Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (Record, error)

	// Renew extends the lease of owner on generation gen. It fails with a
	// *FencedError if gen is no longer current or owner is no longer the
	// owner.
	Renew(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) error

	// SaveState replaces the record's State if gen is current, else fails
	// with a *FencedError.
	SaveState(ctx context.Context, token string, gen uint64, state []byte) error

	// Hibernate saves state as the record's State and lets go of owner's
	// hold on generation gen, in one atomic step: Owner becomes empty and
	// LeaseUntil zero; the generation, the floor, the high-water mark and
	// the events stay (DESIGN.md, "Hibernation"). A record nobody holds
	// is taken again by Wake at the same generation, or by Claim at the
	// next. It fails with a *FencedError if gen is not current or owner
	// is not the owner, and with ErrNotFound or an *EndedError if the
	// session is gone.
	Hibernate(ctx context.Context, token, owner string, gen uint64, state []byte) error

	// Wake makes owner the owner of generation gen again, holding it
	// until leaseUntil (zero: no expiry), if and only if gen is current
	// and nobody holds it (Owner is empty: Hibernate let it go), and
	// returns the record. Unlike Claim it keeps the generation and its
	// events, so every cursor of gen stays valid. It fails with a
	// *FencedError if the generation has moved or another owner holds it
	// (Want is then the current generation), and with ErrNotFound or an
	// *EndedError if the session is gone.
	Wake(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) (Record, error)

	// Touch records a request at time at (LastSeen never moves backwards).
	// It is not fenced: any replica may report activity.
	Touch(ctx context.Context, token string, at time.Time) error

	// End removes the record and its whole event log, and keeps a tombstone
	// with reason and the record's UserID until tombstoneUntil, after which
	// the token is unknown again (still never reissued). Every later call
	// for the token fails with an *EndedError carrying both. Ending an
	// ended session keeps its first reason. It fails with ErrNotFound if
	// the token is unknown.
	End(ctx context.Context, token string, reason EndReason, tombstoneUntil time.Time) error
}

// Log keeps each session's event log.
//
// Guarantees every implementation gives:
//   - Order: Append assigns each session's sequences in increasing order
//     without gaps; concurrent Appends to one session are serialized, and
//     the events of one Append are contiguous.
//   - Durability and visibility, log first (DESIGN.md, "Delivery rules"):
//     Append may return once it has assigned the sequences, before the
//     events are stored (a pipelined store commits them in the
//     background, many at once). Read, Wait and Bounds report only
//     stored events: the high-water mark they give is the session's
//     durable watermark, and an event becomes visible to them only once
//     it is as durable as the backend promises (see Sessions), so no
//     connection sends, and no client holds a cursor above, an event that
//     a crash could take back. Sync waits for what was appended.
//   - Loss: when accepted events cannot be stored, none of them, and no
//     later event of that generation, is ever stored after a gap: the
//     generation is lost (*LostError); its later Appends and its Waits
//     fail, and a LossNotifier hears of it once. Events stored before the
//     loss stay readable.
//   - Fencing: Append stores nothing and fails with a *FencedError if gen is
//     not the record's current generation, checked atomically with the
//     write, so a paused or partitioned old owner cannot write after a
//     takeover.
//   - Retention: events are only removed by Trim, by Claim (older
//     generations), by End, and by a backend's own documented bound on its
//     size (which removes the oldest events of a session, raising its floor
//     as Trim would, and wakes Wait); Floor never decreases within a
//     generation.
type Log interface {
	// Append adds evs to the session's log under generation gen. It sets
	// each event's Seq and Generation (in the slice it was given), and the
	// Stream of an event given Stream == NewStream to its Seq, and returns
	// the bounds as they will be once the events are stored (HWM: the
	// last sequence assigned). A pipelined store returns before that, and
	// makes a caller wait only while the session's events not yet stored
	// exceed the store's documented bound (back-pressure). It does not
	// keep evs after it returns (the caller may reuse the slice; the
	// events' Data it may keep). Errors: *FencedError, ErrNotFound,
	// *EndedError, ErrUnavailable, *LostError, and ctx.Err() when ctx
	// ends while the append waits for room (nothing is appended then).
	Append(ctx context.Context, token string, gen uint64, evs []Event) (Bounds, error)

	// Sync returns once every event appended to the session before the
	// call is stored, or with the *LostError of a generation whose events
	// could not be, or ctx.Err(). A store whose Append stores before it
	// returns returns nil at once. Errors besides: ErrNotFound,
	// *EndedError.
	Sync(ctx context.Context, token string) error

	// Read returns, in sequence order, at most max events of the current
	// generation with Seq > after, and the bounds at the time of the read.
	// Events below the floor are gone; Read does not report them, callers
	// compare after with Bounds.Floor. Errors: ErrNotFound, *EndedError,
	// and ErrLogLost from a backend that can detect that events the bounds
	// say are retained are missing (store/redis).
	Read(ctx context.Context, token string, after uint64, max int) ([]Event, Bounds, error)

	// Wait blocks until the session's HWM exceeds after, its generation
	// changes, its floor rises above after+1, it ends, its generation is
	// lost, or ctx is done. It returns nil in the first three cases (the
	// caller reads again), the error of Read for an ended session, the
	// *LostError of a lost generation, and ctx.Err() when ctx is done.
	Wait(ctx context.Context, token string, after uint64) error

	// Trim removes the events of generation gen with Seq < floor, raising
	// the replay floor to floor (at most HWM+1, HWM being the durable
	// watermark: events not yet stored are not trimmed). A floor at or below the
	// current one changes nothing. Errors: *FencedError if gen is not
	// current, ErrNotFound, *EndedError.
	Trim(ctx context.Context, token string, gen uint64, floor uint64) (Bounds, error)

	// Bounds returns the session's bounds. Errors: ErrNotFound, *EndedError.
	Bounds(ctx context.Context, token string) (Bounds, error)
}

// Errors of Tasks.
var (
	// ErrTaskNotFound: no record for the task ID: never created, deleted,
	// or past its expiry (tasks.Record.Expires).
	ErrTaskNotFound = errors.New("task not found")
	// ErrStale: the task record's revision is no longer the one the write
	// was conditioned on: another process wrote it since it was read.
	// Nothing was written; the caller reads again and applies its rule to
	// what it finds.
	ErrStale = errors.New("task record changed since it was read")
)

// Tasks keeps the records of tasks of the Tasks extension (DESIGN.md,
// "Tasks: the executor rule"), beside the sessions. Every write is
// conditioned on the revision the writer read: a writer reads the record,
// applies the rules of package tasks to it (tasks.Rules.Settle, then
// tasks.Rules.Apply), and stores the outcome only if nobody wrote in
// between, so the executor generation those rules check is the one the
// write replaces, whatever the clocks say.
//
// Guarantees every implementation gives:
//   - Linearizable per task ID; a revision is 1 at creation and grows by
//     one with each write.
//   - Durability: once a call returns nil its effect is as durable as the
//     backend promises (see Sessions).
//   - Expiry: a record is kept at least until its KeepUntil() as last
//     written (its expiry plus tasks.Linger), and is gone soon after it
//     by the store's clock. Between its expiry and KeepUntil a record is
//     still returned: readers apply tasks.Rules.Settle, which settles an
//     expired working task failed (cause Expired) and deletes an expired
//     settled one.
type Tasks interface {
	// CreateTask stores rec at revision 1. It fails with ErrExists if the
	// ID is known.
	CreateTask(ctx context.Context, rec tasks.Record) error

	// GetTask returns the record of id and its revision. It fails with
	// ErrTaskNotFound.
	GetTask(ctx context.Context, id string) (tasks.Record, uint64, error)

	// UpdateTask replaces the record of rec.ID by rec if its revision is
	// still rev, and returns the new revision. It fails with ErrStale, or
	// ErrTaskNotFound if the record is gone.
	UpdateTask(ctx context.Context, rec tasks.Record, rev uint64) (uint64, error)

	// DeleteTask removes the record of id if its revision is still rev.
	// It fails with ErrStale, or ErrTaskNotFound.
	DeleteTask(ctx context.Context, id string, rev uint64) error

	// WorkingTasks calls f with each task whose status is working, and its
	// revision, in no particular order, until f returns false. A task
	// written during the scan may or may not be seen.
	WorkingTasks(ctx context.Context, f func(rec tasks.Record, rev uint64) bool) error

	// ExclusiveTasks reports whether one process at a time opens the store
	// (memory; the durable store's directory lock): a working task written
	// by another process then belongs to a process that has ended
	// (tasks.Reader.Exclusive).
	ExclusiveTasks() bool
}

// LossNotifier is implemented by pipelined stores (see Log, "Loss"). The
// session registry registers with it, so that a generation whose events
// could not be stored ends at once in the process that holds it: its
// streams close, and the next request claims generation+1 (a resume of the
// lost generation then answers 409 generation_mismatch), or answers 503
// while the store is unavailable.
type LossNotifier interface {
	// NotifyLost makes f hear of every lost generation, once, with the
	// session token, the generation and the *LostError. f runs on the
	// store's committer and must not block on the store.
	NotifyLost(f func(token string, gen uint64, err error))
}

// EndNotifier is implemented by a store that ends sessions by itself,
// with no registry asking: the durable store's sweep of the sessions it
// inherited from an earlier process once they have been idle past its
// idle TTL. The session registry registers with it, so that what such a
// session's hibernated engine session kept outside the process (an HTTP
// upstream's session, engine.Releaser) is released, as the registry's own
// end of the session would release it.
type EndNotifier interface {
	// NotifyEnded makes f hear of every session the store ends by
	// itself, once, after the end is stored, with the session's record
	// as it was before the end. f must not block on the store.
	NotifyEnded(f func(rec Record))
}

// Store is a backend: sessions and their logs in one place, so that fencing
// can be checked atomically across them.
type Store interface {
	Sessions
	Log
	// Close releases the backend's resources. Calls after Close fail.
	Close() error
}
