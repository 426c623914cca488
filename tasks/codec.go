// codec.go holds the one encoding of a Record that every store keeps:
// JSON, with the call, the result, the error and the input requests and
// answers embedded as the JSON they are, so that a record read from any
// store, on any replica, renders the same task byte for byte.
package tasks

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tidemark-mcp/tidemark/internal/redact"
)

// stored is a Record as JSON. Field names are short and stable: records
// outlive processes (the durable store, Redis), so a name never changes
// meaning once released.
type stored struct {
	ID         string          `json:"id"`
	Owner      string          `json:"owner,omitempty"`
	Tool       string          `json:"tool"`
	Call       json.RawMessage `json:"call,omitempty"`
	Idempotent bool            `json:"idem,omitempty"`
	Upstream   string          `json:"upstream,omitempty"`
	Status     string          `json:"status"`
	Message    string          `json:"msg,omitempty"`
	Cause      string          `json:"cause,omitempty"`
	Replica    string          `json:"replica"`
	Boot       string          `json:"boot"`
	LeaseUntil int64           `json:"lease,omitempty"` // Unix nanoseconds; 0 for none
	Generation uint64          `json:"gen"`
	Created    int64           `json:"created"` // Unix nanoseconds
	Updated    int64           `json:"updated"` // Unix nanoseconds
	TTL        int64           `json:"ttl"`     // nanoseconds
	Poll       int64           `json:"poll"`    // nanoseconds
	Cancel     bool            `json:"cancel,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      json.RawMessage `json:"error,omitempty"`
	Round      int             `json:"round,omitempty"`
	Slots      map[string]slot `json:"slots,omitempty"`
	State      []byte          `json:"state,omitempty"` // opaque: base64
	Reruns     int             `json:"reruns,omitempty"`
}

type slot struct {
	Key      string          `json:"key"`
	Request  json.RawMessage `json:"req"`
	Response json.RawMessage `json:"resp,omitempty"`
}

// Marshal returns the stored form of rec. It fails only when one of the
// record's JSON fields (Call, Result, Error, a slot's Request or Response)
// is not valid JSON.
func Marshal(rec Record) ([]byte, error) {
	st := stored{
		ID: rec.ID, Owner: rec.Owner, Tool: rec.Tool, Call: rec.Call, Idempotent: rec.Idempotent,
		Upstream: rec.Upstream, Status: rec.Status.String(), Message: rec.Message,
		Replica: rec.Executor.Replica, Boot: rec.Executor.Boot, Generation: rec.Executor.Generation,
		Created: rec.Created.UnixNano(), Updated: rec.Updated.UnixNano(),
		TTL: int64(rec.TTL), Poll: int64(rec.PollInterval), Cancel: rec.CancelRequested,
		Result: rec.Result, Error: rec.Error, Round: rec.Input.Round, State: rec.Input.State,
		Reruns: rec.Reruns,
	}
	if rec.Cause != NoCause {
		st.Cause = rec.Cause.String()
	}
	if !rec.Executor.LeaseUntil.IsZero() {
		st.LeaseUntil = rec.Executor.LeaseUntil.UnixNano()
	}
	if len(rec.Input.Slots) > 0 {
		st.Slots = make(map[string]slot, len(rec.Input.Slots))
		for k, s := range rec.Input.Slots {
			st.Slots[k] = slot{Key: s.Key, Request: s.Request, Response: s.Response}
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("tasks: encoding task %s: %w", Prefix(rec.ID), err)
	}
	return b, nil
}

// Unmarshal returns the record whose stored form is b, or an error when b
// is not one (not JSON, or an unknown status).
func Unmarshal(b []byte) (Record, error) {
	var st stored
	if err := json.Unmarshal(b, &st); err != nil {
		return Record{}, fmt.Errorf("tasks: decoding a stored task: %w", err)
	}
	status, ok := ParseStatus(st.Status)
	if !ok {
		return Record{}, fmt.Errorf("tasks: decoding task %s: unknown status %q", Prefix(st.ID), st.Status)
	}
	cause := NoCause
	if st.Cause != "" {
		if cause, ok = parseCause(st.Cause); !ok {
			return Record{}, fmt.Errorf("tasks: decoding task %s: unknown cause %q", Prefix(st.ID), st.Cause)
		}
	}
	rec := Record{
		ID: st.ID, Owner: st.Owner, Tool: st.Tool, Call: raw(st.Call), Idempotent: st.Idempotent,
		Upstream: st.Upstream, Status: status, Message: st.Message, Cause: cause,
		Executor: Executor{Replica: st.Replica, Boot: st.Boot, Generation: st.Generation},
		Created:  time.Unix(0, st.Created).UTC(), Updated: time.Unix(0, st.Updated).UTC(),
		TTL: time.Duration(st.TTL), PollInterval: time.Duration(st.Poll),
		CancelRequested: st.Cancel, Result: raw(st.Result), Error: raw(st.Error),
		Input:  Input{Round: st.Round, State: st.State},
		Reruns: st.Reruns,
	}
	if st.LeaseUntil != 0 {
		rec.Executor.LeaseUntil = time.Unix(0, st.LeaseUntil).UTC()
	}
	if len(st.Slots) > 0 {
		rec.Input.Slots = make(map[string]Slot, len(st.Slots))
		for k, s := range st.Slots {
			rec.Input.Slots[k] = Slot{Key: s.Key, Request: raw(s.Request), Response: raw(s.Response)}
		}
	}
	return rec, nil
}

// parseCause returns the cause whose name (Cause.String) is w.
func parseCause(w string) (Cause, bool) {
	for c := ExecutorLost; c.String() != NoCause.String(); c++ {
		if c.String() == w {
			return c, true
		}
	}
	return NoCause, false
}

// raw returns m as a byte slice, nil for an absent field.
func raw(m json.RawMessage) []byte {
	if len(m) == 0 {
		return nil
	}
	return []byte(m)
}

// Prefix returns the first redact.Shown (8) characters of a task ID, the
// form in which IDs appear in logs and errors: an ID is a bearer handle
// (DESIGN.md, "Tasks: the executor rule").
func Prefix(id string) string {
	if len(id) > redact.Shown {
		return id[:redact.Shown]
	}
	return id
}
