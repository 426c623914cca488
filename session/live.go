// live.go holds Live, one generation of a session whose live state this
// process holds, with what identifies it and its read-only accessors. What
// a Live does is in the files named for it: activity.go, streams.go,
// outbox.go, state.go, initialize.go, lost.go, logger.go.

package session

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/eventlog"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
)

// Live is one generation of a session whose live state this process holds.
// It routes the engine's outbound messages to streams and appends them to
// the event log (its engine session sees it as an engine.Outbox, outbox.go),
// and it records the session state a later generation needs.
type Live struct {
	reg     *Registry
	token   string
	gen     uint64
	tag     string
	userID  string
	created time.Time // the session's creation (store.Record.Created)
	logger  *slog.Logger
	eng     engine.Session

	lh lazyHandler // l.logger's handler

	mu sync.Mutex
	// calls and streams are nil while the session has no call in flight:
	// an idle session does not keep their emptied tables (about 700 bytes).
	calls   map[jsonrpc.ID]call
	streams map[uint64]*openStream
	// storing counts the responses being appended: their calls have left
	// calls, and CallsInFlight counts them until the append returns (send).
	storing    int
	ledger     ledger     // the requests of this generation's recent streams (lost.go)
	settled    *sync.Cond // on mu, made by the first Refused that waits: a response's place is recorded
	state      engine.State
	lastSeen   time.Time
	storedSeen time.Time // last LastSeen written to the store
	attached   int       // connections serving this session's streams
	leaseUntil time.Time // when this process's lease lapses (zero: never)
	initFailed bool      // initialize was answered with an error
	// initAnswered is set once initialize has been answered; initWait,
	// made only when someone waits before that, is closed then.
	initAnswered bool
	initWait     chan struct{}
	// parked: the registry took l out of its eviction order because it
	// was busy (busyForRoomLocked, recency.victim); the end of what kept
	// it busy hands it back (unparkLocked, Registry.unpark).
	parked bool
	// hibernating: the registry chose l to hibernate (beginHibernate);
	// it serves no further request.
	hibernating bool
	// holds are the contexts of the requests that looked l up (holdFor),
	// one per hold. A hold ends (unhold) in a goroutine of its own once
	// its context is done, so a context here may be done already: its
	// request has been served, and only its release is still to run.
	holds []context.Context
	// hibFailures counts the hibernations in a row that the store
	// refused while l stayed awake (keepsAwake), the latest at hibFailed.
	hibFailures int
	hibFailed   time.Time
	// unsettled: such a refused hibernation reached the store's write,
	// which may have happened although it failed (a reply lost with its
	// connection), leaving the record with no owner; settle confirms the
	// record before l serves again.
	unsettled bool

	// Guarded by reg.mu.
	dropped  bool   // drop has run (see Registry.drop)
	lruKey   uint64 // the stamp l is placed by in reg.lru
	lruIndex int    // l's index in reg.lru; -1 when it is not in it

	// used is the registry's recency stamp of the latest use
	// (Registry.clock); the least recently used session has the lowest.
	used atomic.Uint64

	// resumes counts the streams of this generation resumed so far, here
	// and by the live states before a wake at this generation (NextResume).
	resumes atomic.Uint64
	// wakeMu guards wakeUnsaved: l woke at its generation, and no synced
	// store write has made that wake durable yet (saveWake).
	wakeMu      sync.Mutex
	wakeUnsaved bool

	// prior are the ledgers of earlier generations, from the record
	// (lost.go); set at the start, then only read.
	prior []ledger

	// ahead is set once a resume named a cursor of this generation above
	// the session's high-water mark (EndAhead): nothing more is appended.
	ahead atomic.Pointer[aheadError]
}

func newLive(r *Registry, rec store.Record, st *engine.State, prior []ledger, woken bool) *Live {
	l := &Live{
		reg: r, token: rec.Token, gen: rec.Generation, tag: replay.Tag(rec.Token), userID: rec.UserID,
		created:    rec.Created,
		lastSeen:   r.opts.Now(),
		storedSeen: rec.LastSeen,
		leaseUntil: rec.LeaseUntil,
		lruIndex:   -1,
		ledger:     ledger{Generation: rec.Generation},
		prior:      prior,
	}
	if st != nil {
		l.state = *st
		// What a hibernated engine session kept outside the process is
		// the engine's from now on: this generation's saves leave it out,
		// and a record it is still in (a save of the wake) is held, so
		// recreate drops it.
		l.state.Suspended = nil
	}
	if woken {
		var resumes uint64
		resumes, l.ledger = hibernatedLive(rec.State, rec.Generation)
		l.resumes.Store(resumes)
		l.wakeUnsaved = true
	}
	l.lh.parent, l.lh.live = r.logger.Handler(), l
	l.logger = slog.New(&l.lh)
	return l
}

// Token returns the session token.
func (l *Live) Token() string { return l.token }

// NextResume returns the resume part of the next priming event of a stream
// of this generation resumed (replay.Cursor): 1, 2, 3 and on through the
// generation. One process at a time serves a generation; between two of
// its live states, here or in another process, lies an exact hibernation,
// which stores the count, and the wake at the same generation goes on
// from it (resumesKey). So no two priming events of one generation share
// a number, and the number says nothing about the process's other
// sessions. A new generation starts again at 1: its ids differ from every
// earlier one in their generation part.
//
// The first call after such a wake makes the wake durable first (saveWake):
// a wake the store may still lose would let the next wake number from the
// same count again. Its error is the store's; no number is taken then.
func (l *Live) NextResume(ctx context.Context) (uint64, error) {
	if err := l.saveWake(ctx); err != nil {
		return 0, err
	}
	return l.resumes.Add(1), nil
}

// Generation returns the generation this Live serves.
func (l *Live) Generation() uint64 { return l.gen }

// Tag returns the cursor tag of the session (replay.Tag).
func (l *Live) Tag() string { return l.tag }

// Logger returns the session's logger (with session and generation).
func (l *Live) Logger() *slog.Logger { return l.logger }

// Reader returns a reader of stream in this generation, positioned after
// sequence after.
func (l *Live) Reader(stream, after uint64) *eventlog.Reader {
	return l.reg.log.NewReader(l.token, l.gen, stream, after)
}

// Done is closed when the live state of this generation has ended.
func (l *Live) Done() <-chan struct{} { return l.eng.Done() }

// dead reports whether l's engine session has ended (on its own, or closed).
func (l *Live) dead() bool { return closed(l.eng.Done()) }

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
