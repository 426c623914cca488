// The session inspector of a Handler (admin.Inspector): the registry's
// live sessions, the store's bounds of their logs, and the transport's
// readers of their streams; and its task inspector (admin.TaskInspector):
// the tasks it runs and their records.

package tidemark

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// Recent implements admin.Inspector: how many sessions this Handler holds
// and the n most recently used.
func (h *Handler) Recent(n int) (int, []admin.Summary) {
	all := h.reg.Snapshots("")
	out := make([]admin.Summary, 0, min(n, len(all)))
	for _, s := range all[:min(n, len(all))] {
		out = append(out, h.summary(s, h.Readers(s.Token, s.Generation)))
	}
	return len(all), out
}

// Lookup implements admin.Inspector: the details of the sessions this
// Handler holds whose token starts with prefix. It fails when the store
// cannot give a session's bounds.
func (h *Handler) Lookup(ctx context.Context, prefix string) ([]admin.Detail, error) {
	var out []admin.Detail
	for _, s := range h.reg.Snapshots(prefix) {
		b, err := h.reg.Log().Bounds(ctx, s.Token)
		if err != nil {
			return nil, err
		}
		readers := h.Readers(s.Token, s.Generation)
		d := admin.Detail{
			Summary:         h.summary(s, readers),
			ProtocolVersion: s.ProtocolVersion,
			ReplayFloor:     b.Floor, HighWaterMark: b.HWM, Events: b.Events, Bytes: b.Bytes,
			Owner: s.Owner, Created: s.Created, Streams: []admin.Stream{},
		}
		if !s.LeaseUntil.IsZero() {
			t := s.LeaseUntil
			d.LeaseExpiry = &t
		}
		streams := map[uint64]*admin.Stream{}
		get := func(n uint64) *admin.Stream {
			if streams[n] == nil {
				streams[n] = &admin.Stream{Stream: n}
			}
			return streams[n]
		}
		for n, c := range s.Calls {
			get(n).CallsInFlight = c
		}
		for n, r := range readers {
			get(n).Readers = r
		}
		for _, st := range streams {
			d.Streams = append(d.Streams, *st)
		}
		slices.SortFunc(d.Streams, func(a, b admin.Stream) int { return cmp.Compare(a.Stream, b.Stream) })
		out = append(out, d)
	}
	return out, nil
}

// summary returns the inspector's summary of s, whose streams have readers.
func (h *Handler) summary(s session.Snapshot, readers map[uint64]int) admin.Summary {
	n := 0
	for _, r := range readers {
		n += r
	}
	return admin.Summary{
		Session: tracing.Prefix(s.Token), Generation: s.Generation,
		CallsInFlight: s.CallsInFlight, Readers: n, IdleSeconds: s.Idle.Seconds(),
	}
}

// RunningTasks implements admin.TaskInspector: the tasks this Handler
// runs, the longest running first; none without Options.Tasks.
func (h *Handler) RunningTasks() []admin.Task {
	if h.tasks == nil {
		return nil
	}
	running := h.tasks.RunningTasks()
	out := make([]admin.Task, 0, len(running))
	for _, t := range running {
		out = append(out, admin.Task{
			Task: tasks.Prefix(t.ID), Tool: t.Tool, Generation: t.Generation, Status: tasks.Working.String(),
			Started: t.Started, LeaseExpiry: lease(t.LeaseUntil), CancelRequested: t.CancelRequested,
		})
	}
	return out
}

// LookupTasks implements admin.TaskInspector: the stored state of the
// tasks this Handler runs whose ID starts with prefix. A task that
// settled and left the table meanwhile is left out; a store that cannot
// be read fails the lookup.
func (h *Handler) LookupTasks(ctx context.Context, prefix string) ([]admin.TaskDetail, error) {
	if h.tasks == nil {
		return nil, nil
	}
	var out []admin.TaskDetail
	for _, t := range h.tasks.RunningTasks() {
		if !strings.HasPrefix(t.ID, prefix) {
			continue
		}
		rec, err := h.tasks.Record(ctx, t.ID)
		if errors.Is(err, store.ErrTaskNotFound) {
			continue
		} else if err != nil {
			return nil, err
		}
		out = append(out, admin.TaskDetail{
			Task: tasks.Prefix(rec.ID), Tool: rec.Tool, Generation: rec.Executor.Generation,
			Status: rec.Status.String(), StatusMessage: rec.Message, Reason: string(taskrun.CauseReason(rec.Cause)),
			Executor: rec.Executor.Replica, LeaseExpiry: lease(rec.Executor.LeaseUntil),
			Created: rec.Created, Updated: rec.Updated, Expires: rec.Expires(),
			CancelRequested: rec.CancelRequested, InputRequests: len(rec.Outstanding()),
			Idempotent: rec.Idempotent, Reruns: rec.Reruns,
			RoundGeneration: t.Generation, RoundStarted: t.Started,
		})
	}
	return out, nil
}

// lease returns the time of a lease, nil for none (the zero time).
func lease(until time.Time) *time.Time {
	if until.IsZero() {
		return nil
	}
	return &until
}
