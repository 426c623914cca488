package durable

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// Key layout (format 1). Every key starts with one byte naming its kind;
// a token is stored with a one-byte length so that no token's keys are a
// prefix of another's.
//
//	'r' len token          → record (JSON, recordJSON)
//	'm' len token          → log meta (32 bytes, meta)
//	'e' len token seq(BE8) → event (eventValue); big-endian keeps seq order
//	't' len token          → tombstone (JSON, tombJSON)
//	'k' len taskID         → task record: revision (BE8), then its stored
//	                         form (tasks.Marshal, JSON)
//	'x' expiry(BE8) len taskID → empty: the expiry index of the task records,
//	                         expiry being tasks.Record.Expires in Unix
//	                         nanoseconds, so the expired tasks are one key
//	                         range (DESIGN.md, "Tasks: the executor rule")
//
// Task keys need no FormatVersion of their own: a build that keeps no tasks
// still reads a directory that holds them, as it reads only the kinds of
// keys it knows.
const (
	kindRecord    = 'r'
	kindMeta      = 'm'
	kindEvent     = 'e'
	kindTomb      = 't'
	kindTask      = 'k'
	kindTaskIndex = 'x'
)

// maxTokenLen is the longest session token the key layout holds.
const maxTokenLen = 255

func tokenKey(kind byte, token string) []byte {
	k := make([]byte, 0, 2+len(token)+8)
	k = append(k, kind, byte(len(token)))
	return append(k, token...)
}

func eventKey(token string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(tokenKey(kindEvent, token), seq)
}

// tokenOf returns the token of a record, meta or tombstone key.
func tokenOf(key []byte) (string, error) {
	if len(key) < 2 || int(key[1]) != len(key)-2 {
		return "", fmt.Errorf("malformed key %q", key)
	}
	return string(key[2:]), nil
}

// recordJSON is the stored form of a store.Record.
type recordJSON struct {
	Generation uint64    `json:"generation"`
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until"`
	UserID     string    `json:"user_id,omitempty"`
	State      []byte    `json:"state,omitempty"`
	Created    time.Time `json:"created"`
	LastSeen   time.Time `json:"last_seen"`
	// Openings is store.Record.Openings; a record without any (every
	// record of a build that does not keep them) has no member.
	Openings []openingJSON `json:"openings,omitempty"`
}

// openingJSON is the stored form of a store.Opening.
type openingJSON struct {
	Stream uint64 `json:"stream"`
	Data   []byte `json:"data"`
}

func encodeRecord(r store.Record) []byte {
	j := recordJSON{
		Generation: r.Generation, Owner: r.Owner, LeaseUntil: r.LeaseUntil, UserID: r.UserID,
		State: r.State, Created: r.Created, LastSeen: r.LastSeen,
	}
	for _, o := range r.Openings {
		j.Openings = append(j.Openings, openingJSON(o))
	}
	b, _ := json.Marshal(j)
	return b
}

func decodeRecord(token string, b []byte) (store.Record, error) {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return store.Record{}, fmt.Errorf("record of session %s: %w", store.Prefix(token), err)
	}
	if j.Generation == 0 {
		return store.Record{}, fmt.Errorf("record of session %s: generation 0", store.Prefix(token))
	}
	rec := store.Record{
		Token: token, Generation: j.Generation, Owner: j.Owner, LeaseUntil: j.LeaseUntil, UserID: j.UserID,
		State: j.State, Created: j.Created, LastSeen: j.LastSeen,
	}
	for _, o := range j.Openings {
		rec.Openings = append(rec.Openings, store.Opening(o))
	}
	return rec, nil
}

// meta is the stored bounds of a session's log in its current generation:
// floor, HWM, retained bytes and the time of the event at the floor.
type meta struct {
	floor, hwm uint64
	bytes      int64
	oldest     time.Time
}

const metaLen = 32

func encodeMeta(m meta) []byte {
	b := make([]byte, metaLen)
	binary.BigEndian.PutUint64(b[0:], m.floor)
	binary.BigEndian.PutUint64(b[8:], m.hwm)
	binary.BigEndian.PutUint64(b[16:], uint64(m.bytes))
	var ns int64
	if !m.oldest.IsZero() {
		ns = m.oldest.UnixNano()
	}
	binary.BigEndian.PutUint64(b[24:], uint64(ns))
	return b
}

func decodeMeta(b []byte) (meta, error) {
	if len(b) != metaLen {
		return meta{}, fmt.Errorf("log meta of %d bytes, want %d", len(b), metaLen)
	}
	m := meta{
		floor: binary.BigEndian.Uint64(b[0:]),
		hwm:   binary.BigEndian.Uint64(b[8:]),
		bytes: int64(binary.BigEndian.Uint64(b[16:])),
	}
	if ns := int64(binary.BigEndian.Uint64(b[24:])); ns != 0 {
		m.oldest = time.Unix(0, ns)
	}
	if m.floor == 0 || m.floor > m.hwm+1 {
		return meta{}, fmt.Errorf("log meta floor %d hwm %d bytes %d is inconsistent", m.floor, m.hwm, m.bytes)
	}
	return m, nil
}

// errBadCount is a log meta's byte count below zero (or of events where
// there are none): the events are there, and load counts them again.
var errBadCount = errors.New("byte count inconsistent with the log")

// checkCount returns errBadCount when m's byte count cannot be its
// events' (below zero, or not zero for an empty log).
func (m meta) checkCount() error {
	if m.bytes < 0 || m.hwm < m.floor && m.bytes != 0 {
		return errBadCount
	}
	return nil
}

// Event value: a fixed header, then Data.
//
//	generation u64 | stream u64 | kind u8 | flags u8 | retry ns i64 | time ns i64 | data
const (
	eventHeaderLen = 8 + 8 + 1 + 1 + 8 + 8
	flagEnd        = 1 << 0
	flagHasTime    = 1 << 1
)

func encodeEvent(e *store.Event) []byte {
	b := make([]byte, eventHeaderLen, eventHeaderLen+len(e.Data))
	binary.BigEndian.PutUint64(b[0:], e.Generation)
	binary.BigEndian.PutUint64(b[8:], e.Stream)
	b[16] = byte(e.Kind)
	var flags byte
	if e.End {
		flags |= flagEnd
	}
	var ns int64
	if !e.Time.IsZero() {
		flags |= flagHasTime
		ns = e.Time.UnixNano()
	}
	b[17] = flags
	binary.BigEndian.PutUint64(b[18:], uint64(e.Retry))
	binary.BigEndian.PutUint64(b[26:], uint64(ns))
	return append(b, e.Data...)
}

var errShortEvent = errors.New("event value shorter than its header")

// decodeEvent decodes an event; Data is copied out of b.
func decodeEvent(seq uint64, b []byte) (store.Event, error) {
	if len(b) < eventHeaderLen {
		return store.Event{}, errShortEvent
	}
	e := store.Event{
		Seq:        seq,
		Generation: binary.BigEndian.Uint64(b[0:]),
		Stream:     binary.BigEndian.Uint64(b[8:]),
		Kind:       store.Kind(b[16]),
		End:        b[17]&flagEnd != 0,
		Retry:      time.Duration(binary.BigEndian.Uint64(b[18:])),
	}
	if b[17]&flagHasTime != 0 {
		e.Time = time.Unix(0, int64(binary.BigEndian.Uint64(b[26:])))
	}
	if len(b) > eventHeaderLen {
		e.Data = append([]byte(nil), b[eventHeaderLen:]...)
	}
	return e, nil
}

// eventSize returns store.Event.Size of a stored event value.
func eventSize(b []byte) int64 { return int64(len(b)-eventHeaderLen) + 64 }

// eventTime returns the Time of a stored event value.
func eventTime(b []byte) time.Time {
	if len(b) < eventHeaderLen || b[17]&flagHasTime == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b[26:])))
}

// tombJSON is the stored form of a tombstone. UserID is the ended
// record's user; a tombstone without the field reads as an empty user.
type tombJSON struct {
	Reason store.EndReason `json:"reason"`
	UserID string          `json:"user,omitempty"`
	Until  time.Time       `json:"until"`
}

// taskKey returns the key of the record of task id (1 to maxTokenLen bytes).
func taskKey(id string) []byte { return tokenKey(kindTask, id) }

// taskIndexKey returns the key of the expiry index that names task id as
// expiring at expiry (Unix nanoseconds, expiryNanos).
func taskIndexKey(expiry int64, id string) []byte {
	k := make([]byte, 0, 1+8+1+len(id))
	k = binary.BigEndian.AppendUint64(append(k, kindTaskIndex), uint64(expiry))
	k = append(k, byte(len(id)))
	return append(k, id...)
}

// taskIndexBound returns the key that sorts after the index keys of every
// task expiring at or before expiry, and before all others.
func taskIndexBound(expiry int64) []byte {
	if expiry == math.MaxInt64 {
		return []byte{kindTaskIndex + 1}
	}
	return binary.BigEndian.AppendUint64([]byte{kindTaskIndex}, uint64(expiry+1))
}

// taskIndexEntry returns the expiry and the task ID of an index key.
func taskIndexEntry(key []byte) (int64, string, error) {
	if len(key) < 10 || int(key[9]) != len(key)-10 {
		return 0, "", fmt.Errorf("malformed task index key %q", key)
	}
	return int64(binary.BigEndian.Uint64(key[1:9])), string(key[10:]), nil
}

// expiryNanos returns t in Unix nanoseconds, the form the expiry index
// sorts, clamped to 0 (before 1970) and math.MaxInt64 (after 2262) so that
// it keeps the order of the times it can tell apart.
func expiryNanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// taskRevLen is the length of the revision that heads a task value.
const taskRevLen = 8

// encodeTask returns the value of a task record: rev (BE8), then data,
// the record's stored form.
func encodeTask(rev uint64, data []byte) []byte {
	v := make([]byte, taskRevLen, taskRevLen+len(data))
	binary.BigEndian.PutUint64(v, rev)
	return append(v, data...)
}

// decodeTask returns the record and revision of a task value; nothing of
// the record shares memory with v.
func decodeTask(v []byte) (tasks.Record, uint64, error) {
	if len(v) <= taskRevLen {
		return tasks.Record{}, 0, fmt.Errorf("task value of %d bytes, shorter than a revision and a record", len(v))
	}
	rev := binary.BigEndian.Uint64(v)
	if rev == 0 {
		return tasks.Record{}, 0, errors.New("task value at revision 0")
	}
	rec, err := tasks.Unmarshal(v[taskRevLen:])
	return rec, rev, err
}
