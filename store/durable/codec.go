package durable

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-mcp/tidemark/store"
)

// Key layout (format 1). Every key starts with one byte naming its kind;
// a token is stored with a one-byte length so that no token's keys are a
// prefix of another's.
//
//	'r' len token          → record (JSON, recordJSON)
//	'm' len token          → log meta (40 bytes, meta)
//	'e' len token seq(BE8) → event (eventValue); big-endian keeps seq order
//	't' len token          → tombstone (JSON, tombJSON)
const (
	kindRecord = 'r'
	kindMeta   = 'm'
	kindEvent  = 'e'
	kindTomb   = 't'
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
}

func encodeRecord(r store.Record) []byte {
	b, _ := json.Marshal(recordJSON{
		Generation: r.Generation, Owner: r.Owner, LeaseUntil: r.LeaseUntil, UserID: r.UserID,
		State: r.State, Created: r.Created, LastSeen: r.LastSeen,
	})
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
	return store.Record{
		Token: token, Generation: j.Generation, Owner: j.Owner, LeaseUntil: j.LeaseUntil, UserID: j.UserID,
		State: j.State, Created: j.Created, LastSeen: j.LastSeen,
	}, nil
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

// tombJSON is the stored form of a tombstone.
type tombJSON struct {
	Reason store.EndReason `json:"reason"`
	Until  time.Time       `json:"until"`
}
