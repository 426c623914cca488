// The session inspector's answers: what /debug/sessions and
// /debug/sessions/{token prefix} return as JSON, and tidemark inspect
// prints.

package admin

import (
	"context"
	"time"
)

// Inspector answers the session inspector about the sessions whose live
// state this process holds and those it hibernated (DESIGN.md,
// "Hibernation"). Inspecting a hibernated session never wakes it.
type Inspector interface {
	// Recent returns the List of this process's sessions with its n most
	// recently used: the live ones, most recent first, then the
	// hibernated ones, most recent first. It fails when the store cannot
	// be reached for a hibernated session's record.
	Recent(ctx context.Context, n int) (List, error)
	// Lookup returns the details of every session this process holds or
	// hibernated whose token starts with prefix. It fails when the store
	// cannot be reached for the sessions' bounds or records.
	Lookup(ctx context.Context, prefix string) ([]Detail, error)
}

// Session states of a Summary.
const (
	// StateLive: this process holds the session's live state.
	StateLive = "live"
	// StateHibernated: this process hibernated the session, which keeps
	// only its record in the store; the next request wakes it.
	StateHibernated = "hibernated"
)

// List is the answer of /debug/sessions.
type List struct {
	// Count is the number of sessions whose live state this process holds
	// plus those it hibernated since it started and has not seen woken or
	// ended since. A hibernated session whose record Sessions read and
	// found woken by another replica of a fleet, or ended, is left out of
	// both; those past the sessions listed are counted without a read.
	Count int `json:"count"`
	// Hibernated is how many of Count are hibernated.
	Hibernated int `json:"hibernated"`
	// Sessions are the most recently used of them: the live ones, most
	// recent first, then the hibernated ones, most recent first.
	Sessions []Summary `json:"sessions"`
}

// Details is the answer of /debug/sessions/{token prefix}.
type Details struct {
	Sessions []Detail `json:"sessions"`
}

// Summary is one session in /debug/sessions.
type Summary struct {
	// Session is the token's first 8 characters (never the whole token).
	Session string `json:"session"`
	// State is StateLive or StateHibernated.
	State string `json:"state"`
	// Generation is the session's current generation: for a hibernated
	// session, the record's (a wake keeps it, or claims the next).
	Generation uint64 `json:"generation"`
	// CallsInFlight is the number of requests not yet answered.
	CallsInFlight int `json:"calls_in_flight"`
	// Readers is the number of connections reading the session's streams.
	Readers int `json:"readers"`
	// IdleSeconds is the time since the session's latest request, in
	// seconds. A hibernated session hibernated --hibernate-after past
	// that request, at the sweep that followed.
	IdleSeconds float64 `json:"idle_seconds"`
}

// Detail is one session in /debug/sessions/{token prefix}.
type Detail struct {
	Summary
	// ProtocolVersion is the MCP protocol version the session negotiated.
	ProtocolVersion string `json:"protocol_version,omitempty"`
	// ReplayFloor is the lowest sequence a client may still cite;
	// HighWaterMark the highest emitted (DESIGN.md, "Vocabulary").
	ReplayFloor   uint64 `json:"replay_floor"`
	HighWaterMark uint64 `json:"high_water_mark"`
	// Events and Bytes are what the session's log retains.
	Events int   `json:"events"`
	Bytes  int64 `json:"bytes"`
	// Owner is the process or replica that holds the live state, and
	// LeaseExpiry when its lease lapses unless renewed (absent when the
	// claim lasts as long as the process); "" and absent for a
	// hibernated session, which nobody holds.
	Owner       string     `json:"owner"`
	LeaseExpiry *time.Time `json:"lease_expiry,omitempty"`
	// Created is when the session was created.
	Created time.Time `json:"created"`
	// Streams are the session's streams that have a call in flight or a
	// reader, by number (0: the standalone GET stream).
	Streams []Stream `json:"streams"`
}

// Stream is one stream of a Detail.
type Stream struct {
	// Stream is the stream's number: the sequence of its opening event,
	// or 0 for the standalone GET stream.
	Stream uint64 `json:"stream"`
	// CallsInFlight is the number of the stream's requests not yet
	// answered.
	CallsInFlight int `json:"calls_in_flight"`
	// Readers is the number of connections reading it (0 or 1: one
	// reader per stream).
	Readers int `json:"readers"`
}

// Fleet is what tidemark inspect --fleet reads from a fleet's Redis: the
// replicas of the directory and the session records, whichever replica
// owns them (package store/redis: Replicas, EachSession).
type Fleet struct {
	// Replicas are the replicas in the directory, by ID, then the owners
	// of sessions that are not in it (URL empty): stopped or dead
	// replicas whose leases other replicas take over.
	Replicas []FleetReplica `json:"replicas"`
	// Count is the number of session records in Redis (those matching the
	// token prefix, when one is given).
	Count int `json:"count"`
	// Sessions are the most recently used of them, most recent first (all
	// of those matching a token prefix).
	Sessions []FleetSession `json:"sessions"`
}

// FleetReplica is one replica of a Fleet.
type FleetReplica struct {
	// ID is the replica's ID; "" for the sessions that no replica owns.
	ID string `json:"id"`
	// URL is where it serves MCP; "" when it is not in the directory.
	URL string `json:"url"`
	// TTLSeconds is how long its directory entry lasts unless renewed, in
	// seconds; 0 when it is not in the directory.
	TTLSeconds float64 `json:"ttl_seconds"`
	// Sessions is the number of session records it owns (of Fleet.Count).
	Sessions int `json:"sessions"`
}

// FleetSession is one session record of a Fleet.
type FleetSession struct {
	// Session is the token's first 8 characters (never the whole token).
	Session string `json:"session"`
	// Owner is the replica that holds its live state ("" for none), and
	// Generation that state's generation (its fencing token).
	Owner      string `json:"owner"`
	Generation uint64 `json:"generation"`
	// LeaseExpiry is when the owner's lease lapses unless renewed; absent
	// for a claim that lasts as long as the owner process.
	LeaseExpiry *time.Time `json:"lease_expiry,omitempty"`
	// Created is when the session was created.
	Created time.Time `json:"created"`
	// IdleSeconds is the time since the session's latest request recorded
	// in Redis, in seconds.
	IdleSeconds float64 `json:"idle_seconds"`
}
