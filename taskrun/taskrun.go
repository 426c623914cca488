// Package taskrun serves the Tasks extension (io.modelcontextprotocol/tasks,
// SEP-2663; protocol 2026-07-28) in front of the sessionless-era handler of
// any engine (DESIGN.md, "Tasks: the executor rule").
//
// A Handler wraps that handler. It decides each request with tasks.Gate;
// answers tasks/get, tasks/update and tasks/cancel from a store.Tasks; adds
// the extension to the server/discover answer; and for a tools/call that
// becomes a task, stores the record first, answers CreateTaskResult, and
// runs the call in this process as an ordinary call through the wrapped
// handler, without the tasks declaration. What the call answers settles
// the round, through the rules of package tasks and a write conditioned on
// the revision read, so that an executor that lost the task stores
// nothing.
package taskrun

import (
	"cmp"
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-mcp/tidemark/metrics"
	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// Defaults of Options (DESIGN.md, "Tasks: the executor rule").
const (
	// DefaultTTL is a task's ttlMs, also its maximum: the event log's
	// retention.
	DefaultTTL = time.Hour
	// DefaultKeep is how long a settled task stays readable at least.
	DefaultKeep = 10 * time.Minute
	// DefaultPoll is pollIntervalMs.
	DefaultPoll = time.Second
	// DefaultMax is the most tasks one process runs at once.
	DefaultMax = 1000
	// MaxResult bounds a stored result, in bytes: a larger one is stored
	// failed with reason result_too_large.
	MaxResult = 8 << 20
	// sweepEvery is how often Start's sweep settles the working tasks of
	// the store whose executor is gone, even when nobody reads them.
	sweepEvery = 5 * time.Second
)

// Tool is how one tool takes part in tasks.
type Tool struct {
	// Support: Forbidden (the zero value) answers at once, Optional runs as
	// a task for a request that declared the extension, Required only as a
	// task.
	Support tasks.Support
	// Idempotent marks the tool safe to run again after its executor was
	// lost (with Options.Reruns); a tool whose tools/list annotations say
	// idempotentHint true is treated so as well.
	Idempotent bool
	// Window is how long a new task's first round may take to be answered
	// as it is: an input_required answer within it goes to the client as a
	// plain answer and no task remains (an input round before any task);
	// any other outcome within it, or none, answers CreateTaskResult. 0:
	// CreateTaskResult at once.
	Window time.Duration
}

// Options configures a Handler.
type Options struct {
	// Store keeps the task records. Required.
	Store store.Tasks
	// Tools returns how the tool named name takes part in tasks; nil: no
	// tool does.
	Tools func(name string) Tool
	// Replica names this process in the fleet (its replica ID); default
	// "local".
	Replica string
	// Boot is the ID of this process, new at every start; default a random
	// one.
	Boot string
	// Lease is the lease this process takes on the tasks it runs, renewed
	// every Renew; 0 (memory, durable store): no leases, a process that
	// ends is known gone by its boot ID.
	Lease, Renew time.Duration
	// TTL is each task's time to live (ttlMs); default and most DefaultTTL.
	TTL time.Duration
	// Keep is how long a settled task stays readable at least; default
	// DefaultKeep.
	Keep time.Duration
	// Poll is pollIntervalMs; default DefaultPoll.
	Poll time.Duration
	// Max is the most tasks this process runs at once; beyond it an
	// optional tool answers at once and a required one is refused (503
	// capacity). Default DefaultMax.
	Max int
	// Reruns is how many times a task of an idempotent tool may run again
	// after its executor was lost; 0, the default: never.
	Reruns int
	// Subject returns who sent r: a task's owner, the only one who sees
	// it. Default: "" for everyone.
	Subject func(*http.Request) string
	// Logger receives one line per create, settle, re-run and fenced
	// write. Default: none.
	Logger *slog.Logger
	// Metrics records tasks created, settled, cancelled, re-run and
	// running (metrics.Tasks). Default: none.
	Metrics metrics.Tasks
	// Tracer starts a span per round this process runs, linked to the
	// request that started it, and one per settle by a reader
	// (tracing.Tracer.StartTaskRound, TaskSettled). Default: none.
	Tracer *tracing.Tracer
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Handler serves the Tasks extension in front of a sessionless-era handler.
type Handler struct {
	inner http.Handler
	opts  Options
	rules tasks.Rules
	log   *slog.Logger
	tools *toolCache

	mu        sync.Mutex
	jobs      map[string]*job // running tasks by ID
	done      settledTable    // tasks whose round ran here and settled
	waiting   settledTable    // tasks whose round ran here and that wait for input (Status unset)
	closing   bool
	started   bool
	wg        sync.WaitGroup // the jobs' goroutines
	sweeping  sync.WaitGroup // Start's sweep
	renewing  sync.WaitGroup // Start's lease renewal
	stopSweep context.CancelFunc
	stopRenew context.CancelFunc
}

// New returns a Handler serving the Tasks extension in front of inner.
// It panics when opts.Store is nil.
func New(inner http.Handler, opts Options) *Handler {
	if opts.Store == nil {
		panic("taskrun: Options.Store is required")
	}
	if opts.Tools == nil {
		opts.Tools = func(string) Tool { return Tool{} }
	}
	if opts.Replica == "" {
		opts.Replica = "local"
	}
	if opts.Boot == "" {
		opts.Boot = rand.Text()
	}
	if opts.TTL <= 0 || opts.TTL > DefaultTTL {
		opts.TTL = DefaultTTL
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	if opts.Lease > 0 && opts.Renew <= 0 {
		opts.Renew = opts.Lease / 3
	}
	if opts.Subject == nil {
		opts.Subject = func(*http.Request) string { return "" }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.Discard
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{
		inner: inner, opts: opts, log: log,
		rules: tasks.Rules{Keep: opts.Keep, Reruns: opts.Reruns},
		tools: &toolCache{hints: map[string]bool{}},
		jobs:  map[string]*job{},
	}
}

// Boot returns the ID of this process that the records it writes carry.
func (h *Handler) Boot() string { return h.opts.Boot }

// Running returns how many tasks this process runs now.
func (h *Handler) Running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs)
}

// RunningTask is one task this process runs, as Handler.RunningTasks
// gives it.
type RunningTask struct {
	// ID is the whole task ID, a bearer handle: show only tasks.Prefix of
	// it.
	ID string
	// Tool is the name of the tool the task calls.
	Tool string
	// Generation is the executor generation the round runs at.
	Generation uint64
	// Started is when this process started the round.
	Started time.Time
	// LeaseUntil is the lease this process last stored for the task; the
	// zero time without leases.
	LeaseUntil time.Time
	// CancelRequested reports that a tasks/cancel reached the round's call.
	CancelRequested bool
}

// RunningTasks returns the tasks this process runs, the longest running
// first, then by ID.
func (h *Handler) RunningTasks() []RunningTask {
	h.mu.Lock()
	jobs := make([]*job, 0, len(h.jobs))
	for _, j := range h.jobs {
		jobs = append(jobs, j)
	}
	h.mu.Unlock()
	out := make([]RunningTask, 0, len(jobs))
	for _, j := range jobs {
		j.mu.Lock()
		out = append(out, RunningTask{
			ID: j.id, Tool: j.tool, Generation: j.gen, Started: j.started,
			LeaseUntil: j.leaseUntil, CancelRequested: j.cancelReq,
		})
		j.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b RunningTask) int {
		return cmp.Or(a.Started.Compare(b.Started), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// SettledTask is a task whose last round this process ran and that
// settled there, as Handler.SettledTasks gives it.
type SettledTask struct {
	// ID is the whole task ID, a bearer handle: show only tasks.Prefix of
	// it.
	ID string
	// Tool is the name of the tool the task calls.
	Tool string
	// Generation and Started are the executor generation of the round
	// that ran here and when it started.
	Generation uint64
	Started    time.Time
	// Status is the terminal status stored: completed, failed or
	// cancelled, which never changes again (SEP-2663, "Task Status").
	Status tasks.Status
	// Settled is when the task settled (its lastUpdatedAt), and Expires
	// when its record goes (createdAt + ttlMs, as stored at the settle).
	Settled, Expires time.Time
	// CancelRequested reports that a tasks/cancel asked the task to stop
	// before it settled, as its record says.
	CancelRequested bool
}

// MaxSettled is how many settled tasks a Handler remembers at most for
// SettledTasks; beyond it the earliest settled are forgotten first.
const MaxSettled = 10000

// SettledTasks returns the tasks whose last round this process ran and
// that settled, while their records are kept (until Expires, by
// Options.Now), the most recently settled first, then by ID; at most
// MaxSettled. A settled task's status is final, so it is given without
// reading the store.
func (h *Handler) SettledTasks() []SettledTask {
	now := h.opts.Now()
	h.mu.Lock()
	out := h.done.list(now)
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b SettledTask) int {
		return cmp.Or(b.Settled.Compare(a.Settled), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// settledTable holds the tasks a Handler ran that settled, by ID, and
// their IDs in the order they were added, to forget the earliest first.
type settledTable struct {
	byID  map[string]SettledTask
	order []string
}

// add keeps t, forgetting the entries past their expiry at now from the
// earliest added, and the earliest beyond MaxSettled.
func (st *settledTable) add(t SettledTask, now time.Time) {
	if st.byID == nil {
		st.byID = map[string]SettledTask{}
	}
	if _, ok := st.byID[t.ID]; !ok {
		st.order = append(st.order, t.ID)
	}
	st.byID[t.ID] = t
	for len(st.order) > 0 {
		first, ok := st.byID[st.order[0]]
		if ok && len(st.byID) <= MaxSettled && now.Before(first.Expires) {
			break
		}
		delete(st.byID, st.order[0])
		st.order = st.order[1:]
	}
}

// take removes the entry of id and returns it, if there is one.
func (st *settledTable) take(id string) (SettledTask, bool) {
	t, ok := st.byID[id]
	if !ok {
		return SettledTask{}, false
	}
	delete(st.byID, id)
	if i := slices.Index(st.order, id); i >= 0 {
		st.order = slices.Delete(st.order, i, i+1)
	}
	return t, true
}

// list returns the entries whose records are still kept at now.
func (st *settledTable) list(now time.Time) []SettledTask {
	out := make([]SettledTask, 0, len(st.byID))
	for _, t := range st.byID {
		if now.Before(t.Expires) {
			out = append(out, t)
		}
	}
	return out
}

// Record returns the record of task id as the store holds it, without
// settling it; store.ErrTaskNotFound when there is none.
func (h *Handler) Record(ctx context.Context, id string) (tasks.Record, error) {
	rec, _, err := h.opts.Store.GetTask(ctx, id)
	return rec, err
}

// reader is this process as the reader of the record of task id.
func (h *Handler) reader(id string) tasks.Reader {
	h.mu.Lock()
	_, runs := h.jobs[id]
	h.mu.Unlock()
	return tasks.Reader{
		Replica: h.opts.Replica, Boot: h.opts.Boot, Exclusive: h.opts.Store.ExclusiveTasks(),
		Runs: runs, Lease: h.opts.Lease,
	}
}

// self is this process as an executor at now.
func (h *Handler) self(now time.Time) tasks.Executor {
	ex := tasks.Executor{Replica: h.opts.Replica, Boot: h.opts.Boot}
	if h.opts.Lease > 0 {
		ex.LeaseUntil = now.Add(h.opts.Lease)
	}
	return ex
}

// Start settles every working task of the store whose executor is gone
// (on a durable store: every task of the previous process, before this one
// serves), then sweeps the store every few seconds until Shutdown, and
// with leases renews those of the tasks this process runs until Shutdown
// has stopped them. The error is the store's, from the first scan.
func (h *Handler) Start(ctx context.Context) error {
	err := h.sweep(ctx)
	base := context.WithoutCancel(ctx)
	sctx, stopSweep := context.WithCancel(base)
	rctx, stopRenew := context.WithCancel(base)
	h.mu.Lock()
	if h.closing || h.started {
		h.mu.Unlock()
		stopSweep()
		stopRenew()
		return err
	}
	h.started, h.stopSweep, h.stopRenew = true, stopSweep, stopRenew
	h.mu.Unlock()
	h.sweeping.Add(1)
	go func() {
		defer h.sweeping.Done()
		h.every(sctx, sweepEvery, func() { h.sweep(sctx) })
	}()
	if h.opts.Lease > 0 {
		h.renewing.Add(1)
		go func() {
			defer h.renewing.Done()
			h.every(rctx, h.opts.Renew, func() { h.renew(rctx) })
		}()
	}
	return err
}

// every calls f every d until ctx ends.
func (h *Handler) every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Shutdown stops taking tasks and sweeping, waits for the running tasks
// until ctx ends, renewing their leases meanwhile (a task that ends within
// the wait reads what its call reached, on every replica), then cancels
// those left and releases their leases (expiry now), so that the next
// reader settles them at once; it returns when every goroutine of the
// Handler has ended. The renewal stops before the release, so no renewal
// extends a released lease.
func (h *Handler) Shutdown(ctx context.Context) {
	h.mu.Lock()
	h.closing = true
	stopSweep, stopRenew := h.stopSweep, h.stopRenew
	h.mu.Unlock()
	if stopSweep != nil {
		stopSweep()
	}
	h.sweeping.Wait()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if stopRenew != nil {
		stopRenew()
	}
	h.renewing.Wait()
	select {
	case <-done:
		return
	default:
	}
	h.mu.Lock()
	for _, j := range h.jobs {
		j.abandon(replay.ReasonShutdown)
	}
	h.mu.Unlock()
	<-done
}

// CauseReason is the catalogue word of why Tidemark settled a task with
// cause c (executor_lost, task_expired); "" for tasks.NoCause.
func CauseReason(c tasks.Cause) replay.Reason {
	switch c {
	case tasks.ExecutorLost:
		return replay.ReasonExecutorLost
	case tasks.Expired:
		return replay.ReasonTaskExpired
	}
	return ""
}
