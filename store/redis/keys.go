package redis

// Key layout. Every key of one session shares the hash tag {TOKEN}, so a
// Lua script that touches all of them runs on one shard of a Redis Cluster
// as well as on a single Redis. With the default prefix:
//
//	tidemark:{TOKEN}:rec   hash    the session record and the log's bounds
//	tidemark:{TOKEN}:log   stream  the event log of the current generation
//	tidemark:{TOKEN}:wake  stream  one entry per Claim, Trim and End (MAXLEN 1)
//	tidemark:{TOKEN}:end   string  the tombstone, with a TTL: REASON or REASON USER
//	                               (decTomb)
//	tidemark:{TOKEN}:open  zset    the POST streams of the current generation
//	                               opened and not ended: member and score the
//	                               stream's number (trimLua)
//
// Every key of a session but the tombstone expires once no write has
// reached the session for a while, the record first (expiry.go); End
// removes them and gives the tombstone and the wake stream TTLs of their
// own.
//
// Besides the sessions, the replica directory (fleet.go) has one key per
// replica, tidemark:replica:ID, a string holding the replica's URL, with
// a TTL; and readiness probes (Check, check.go) write tidemark:readiness,
// a string "1" with a TTL of a minute, shared by the fleet.
//
// A task (tasks.go) has one key, with the hash tag {t:ID} (the "t:" keeps
// a task's tag apart from any session token's), so that it and any key a
// task gains later share one Cluster slot:
//
//	tidemark:{t:ID}:task   hash    rev (decimal) and data (tasks.Marshal),
//	                               expiring at the record's KeepUntil()
//	tidemark:tasks:working zset    the IDs of working tasks, scored by
//	                               their lease's end (Unix ms); its own slot
//
// The rec hash has these fields (all decimal strings unless said):
//
//	gen      generation (the fencing token)
//	owner    owner id (text)
//	lease    lease expiry, Unix nanoseconds; "" for none
//	user     user id (text)
//	state    engine state (opaque bytes)
//	created  Unix nanoseconds; "" for the zero time
//	seen     LastSeen, Unix nanoseconds; "" for the zero time
//	floor    replay floor (sequence)
//	hwm      high-water mark (sequence)
//	cum      bytes (Event.Size) of every event ever appended to the session
//	base     cum up to and including the event just below the floor, so the
//	         retained bytes are cum - base without reading the log
//	oldest   Time of the event at the floor, Unix nanoseconds; "" if none
//	open     the openings of streams whose opening entry Trim removed before
//	         their end (store.Record.Openings, trimLua): a JSON array of
//	         [STREAM, DATA] string pairs, DATA "" for the mark
//	         (store.Openings.Dropped); absent when there are none
//
// Each log entry has the ID "SEQ-0", so the stream's IDs are the sequences:
// XRANGE from "N" reads from sequence N, XTRIM MINID N raises the floor to
// N. Its fields: gen, stream, kind, end ("1" or "0"), retry (nanoseconds),
// time (Unix nanoseconds, "" for zero), data, cum (the rec's cum after this
// event). An event whose kind, end and retry are all zero (a message that
// does not end its stream: nearly every event of a flood) is stored
// without those three fields, and a reader takes a missing field as zero,
// as every version of this store has: Redis then runs and stores five
// fields per event instead of eight, and readers parse five. Entries with
// the same fields in the same order share their field names, stored once
// per stream node; an entry with all eight in a node whose first entry
// has five (or the other way round) stores its names itself.
type keys struct {
	rec, log, wake, tomb, opens string
}

func (s *Store) keys(token string) keys {
	base := s.prefix + "{" + token + "}:"
	return keys{rec: base + "rec", log: base + "log", wake: base + "wake", tomb: base + "end", opens: base + "open"}
}

// all returns the keys in the order every script declares them (KEYS[1..5]).
func (k keys) all() []string { return []string{k.rec, k.log, k.wake, k.tomb, k.opens} }

// taskKey returns the key of task id's hash.
func (s *Store) taskKey(id string) string { return s.prefix + "{t:" + id + "}:task" }

// workingKey returns the key of the working index.
func (s *Store) workingKey() string { return s.prefix + "tasks:working" }
