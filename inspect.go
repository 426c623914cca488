// The session inspector of a Handler (admin.Inspector): the registry's
// live sessions, the store's bounds of their logs, and the transport's
// readers of their streams, then the sessions it hibernated, from their
// records; and its task inspector (admin.TaskInspector):
// the tasks it runs and their records.

package tidemark

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/session"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
	"github.com/tidemark-mcp/tidemark/tracing"
)

// Recent implements admin.Inspector: how many sessions this Handler holds
// or hibernated, and the n most recently used: the live ones first, then
// the hibernated ones, each read from its record without waking it. A
// hibernated session whose record says it is no longer hibernated (woken
// by another replica, or ended) is neither listed nor counted, so the
// counts agree with the list; those past the n listed are counted
// unread.
func (h *Handler) Recent(ctx context.Context, n int) (admin.List, error) {
	all := h.reg.Snapshots("")
	hib := h.hibernated(all, "")
	l := admin.List{Count: len(all) + len(hib), Hibernated: len(hib), Sessions: make([]admin.Summary, 0, min(n, len(all)+len(hib)))}
	for _, s := range all[:min(n, len(all))] {
		l.Sessions = append(l.Sessions, h.summary(s, h.Readers(s.Token, s.Generation)))
	}
	for _, hs := range hib {
		if len(l.Sessions) >= n {
			break
		}
		d, ok, err := h.dormant(ctx, hs)
		if err != nil {
			return admin.List{}, err
		}
		if ok {
			l.Sessions = append(l.Sessions, d.Summary)
		} else {
			l.Count--
			l.Hibernated--
		}
	}
	return l, nil
}

// Lookup implements admin.Inspector: the details of the sessions this
// Handler holds or hibernated whose token starts with prefix, the live
// ones first; a hibernated one is read from its record and the store's
// bounds of its log, and not woken. It fails when the store cannot give a
// session's bounds or record.
func (h *Handler) Lookup(ctx context.Context, prefix string) ([]admin.Detail, error) {
	var out []admin.Detail
	live := h.reg.Snapshots(prefix)
	for _, s := range live {
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
	for _, hs := range h.hibernated(live, prefix) {
		d, ok, err := h.dormant(ctx, hs)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		b, err := h.reg.Log().Bounds(ctx, hs.Token)
		if err != nil {
			return nil, err
		}
		d.ReplayFloor, d.HighWaterMark, d.Events, d.Bytes = b.Floor, b.HWM, b.Events, b.Bytes
		out = append(out, d)
	}
	return out, nil
}

// hibernated returns the sessions the registry hibernated whose token
// starts with prefix, most recently used first, but those of live (a wake
// under way: the session is live already).
func (h *Handler) hibernated(live []session.Snapshot, prefix string) []session.HibernatedSession {
	hib := h.reg.HibernatedSessions(prefix)
	if len(hib) == 0 || len(live) == 0 {
		return hib
	}
	woken := make(map[string]bool, len(live))
	for _, s := range live {
		woken[s.Token] = true
	}
	return slices.DeleteFunc(hib, func(hs session.HibernatedSession) bool { return woken[hs.Token] })
}

// dormant returns the inspector's detail of hibernated session hs from its
// record, without the log's bounds, and false when the record says it is
// no longer hibernated (ended, or held by a replica that woke it). Reading
// the record wakes nothing.
func (h *Handler) dormant(ctx context.Context, hs session.HibernatedSession) (admin.Detail, bool, error) {
	rec, err := h.st.Get(ctx, hs.Token)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrEnded):
		return admin.Detail{}, false, nil
	case err != nil:
		return admin.Detail{}, false, err
	case rec.Owner != "":
		return admin.Detail{}, false, nil
	}
	var st engine.State
	json.Unmarshal(rec.State, &st) // a state that does not decode shows no version
	return admin.Detail{
		Summary: admin.Summary{
			Session: tracing.Prefix(hs.Token), State: admin.StateHibernated, Generation: rec.Generation,
			IdleSeconds: hs.Idle.Seconds(),
		},
		ProtocolVersion: st.ProtocolVersion,
		Created:         rec.Created,
		Streams:         []admin.Stream{},
	}, true, nil
}

// summary returns the inspector's summary of s, whose streams have readers.
func (h *Handler) summary(s session.Snapshot, readers map[uint64]int) admin.Summary {
	n := 0
	for _, r := range readers {
		n += r
	}
	return admin.Summary{
		Session: tracing.Prefix(s.Token), State: admin.StateLive, Generation: s.Generation,
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

// SettledTasks implements admin.TaskInspector: the tasks whose last round
// this Handler ran and that settled, while their records are kept, the
// most recently settled first (taskrun.Handler.SettledTasks); none
// without Options.Tasks.
func (h *Handler) SettledTasks() []admin.Task {
	if h.tasks == nil {
		return nil
	}
	settled := h.tasks.SettledTasks()
	out := make([]admin.Task, 0, len(settled))
	for _, t := range settled {
		out = append(out, admin.Task{
			Task: tasks.Prefix(t.ID), Tool: t.Tool, Generation: t.Generation, Status: t.Status.String(),
			Started: t.Started, Settled: &t.Settled, CancelRequested: t.CancelRequested,
		})
	}
	return out
}

// LookupTasks implements admin.TaskInspector: the stored state of the
// tasks this Handler runs, then of those it ran that settled while their
// records are kept, whose ID starts with prefix. A task whose record is
// gone meanwhile is left out; a store that cannot be read fails the
// lookup.
func (h *Handler) LookupTasks(ctx context.Context, prefix string) ([]admin.TaskDetail, error) {
	if h.tasks == nil {
		return nil, nil
	}
	var out []admin.TaskDetail
	rounds := h.tasks.RunningTasks()
	for _, t := range h.tasks.SettledTasks() {
		rounds = append(rounds, taskrun.RunningTask{ID: t.ID, Tool: t.Tool, Generation: t.Generation, Started: t.Started})
	}
	for _, t := range rounds {
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
