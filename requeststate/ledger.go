package requeststate

// This file holds the memory of used states that makes a state single-use.

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultLedgerEntries is MemoryLedger's default bound: how many used
// states it remembers at once.
const DefaultLedgerEntries = 100_000

// ErrLedgerFull is what a Ledger returns when it cannot remember one more
// state; Open then refuses the state with reason capacity rather than
// accept it without being able to refuse its replay.
var ErrLedgerFull = errors.New("requeststate: the ledger of used states is full")

// A Ledger remembers which states were opened, so that each opens once
// (MCP 2026-07-28, basic/patterns/mrtr: a state that must be consumed at
// most once is enforced server-side). Replicas that share one Ledger refuse
// a replay on any of them; a Ledger per process refuses it only on the
// process that saw the first use.
type Ledger interface {
	// Use records the state id (an opaque string of at most 32 bytes) as
	// used until expires, and reports whether it was unused before. now is
	// the Sealer's clock, for entries whose expiry has passed. It returns
	// ErrLedgerFull when it has no room, or another error when it cannot
	// be reached; it then records nothing.
	Use(ctx context.Context, id string, now, expires time.Time) (fresh bool, err error)
}

// MemoryLedger is a Ledger in this process's memory: a map from state id
// to expiry and a heap that forgets each entry once its expiry has passed.
// It holds at most its bound of entries; when full, Use returns
// ErrLedgerFull until entries expire. It is safe for concurrent use.
type MemoryLedger struct {
	max int

	mu      sync.Mutex
	expires map[string]time.Time
	order   expiryHeap
}

// NewMemoryLedger returns an empty MemoryLedger that remembers at most
// maxEntries states (entries; 0 or less: DefaultLedgerEntries).
func NewMemoryLedger(maxEntries int) *MemoryLedger {
	if maxEntries <= 0 {
		maxEntries = DefaultLedgerEntries
	}
	return &MemoryLedger{max: maxEntries, expires: make(map[string]time.Time)}
}

// Use implements Ledger. It never returns an error other than
// ErrLedgerFull.
func (l *MemoryLedger) Use(_ context.Context, id string, now, expires time.Time) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.order) > 0 && !l.order[0].expires.After(now) {
		e := heap.Pop(&l.order).(ledgerEntry)
		delete(l.expires, e.id)
	}
	if _, used := l.expires[id]; used {
		return false, nil
	}
	if len(l.expires) >= l.max {
		return false, fmt.Errorf("%w: %d states remembered until they expire (the bound)", ErrLedgerFull, l.max)
	}
	l.expires[id] = expires
	heap.Push(&l.order, ledgerEntry{id: id, expires: expires})
	return true, nil
}

// Len returns how many states the ledger remembers now, expired ones
// included until the next Use forgets them.
func (l *MemoryLedger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.expires)
}

type ledgerEntry struct {
	id      string
	expires time.Time
}

// expiryHeap orders entries by expiry, earliest first (container/heap).
type expiryHeap []ledgerEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(ledgerEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
