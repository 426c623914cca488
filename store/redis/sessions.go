package redis

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/store"
)

// Create implements store.Sessions. It fails with ErrExists for a token
// with a record or an unexpired tombstone.
func (s *Store) Create(ctx context.Context, rec store.Record) error {
	_, err := s.runReplicated(ctx, s.scripts.create, "create", rec.Token, rec.Generation,
		strconv.FormatUint(rec.Generation, 10), rec.Owner, encTime(rec.LeaseUntil), rec.UserID,
		string(rec.State), encTime(rec.Created), encTime(rec.LastSeen))
	return err
}

// Get implements store.Sessions.
func (s *Store) Get(ctx context.Context, token string) (store.Record, error) {
	k := s.keys(token)
	var h *goredis.MapStringStringCmd
	var tomb *goredis.StringCmd
	if err := s.tx(ctx, "get", token, func(p goredis.Pipeliner) {
		h = p.HGetAll(ctx, k.rec)
		tomb = p.Get(ctx, k.tomb)
	}); err != nil {
		return store.Record{}, err
	}
	m, err := h.Result()
	if err != nil {
		return store.Record{}, fail(ctx, "get", token, err)
	}
	if len(m) == 0 {
		return store.Record{}, missing("get", token, tomb)
	}
	return decRecord(token, m), nil
}

// Claim implements store.Sessions: a compare-and-set of the generation in
// one script, which also drops the log of the older generations and sets
// the floor to HWM+1.
func (s *Store) Claim(ctx context.Context, token, owner string, from uint64, leaseUntil time.Time) (store.Record, error) {
	defer s.barrier(ctx, token)()
	rest, err := s.runReplicated(ctx, s.scripts.claim, "claim", token, from,
		strconv.FormatUint(from, 10), owner, encTime(leaseUntil))
	if err != nil {
		return store.Record{}, err
	}
	return pairsRecord(token, rest), nil
}

// pairsRecord decodes the record a script returns as the flat list of
// its hash's fields and values (HGETALL's form).
func pairsRecord(token string, pairs []any) store.Record {
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[str(pairs[i])] = str(pairs[i+1])
	}
	return decRecord(token, m)
}

// Renew implements store.Sessions.
func (s *Store) Renew(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) error {
	_, err := s.run(ctx, s.scripts.renew, "renew", token, gen,
		strconv.FormatUint(gen, 10), owner, encTime(leaseUntil))
	return err
}

// SaveState implements store.Sessions.
func (s *Store) SaveState(ctx context.Context, token string, gen uint64, state []byte) error {
	_, err := s.runReplicated(ctx, s.scripts.saveState, "save state", token, gen,
		strconv.FormatUint(gen, 10), string(state))
	return err
}

// Hibernate implements store.Sessions: the state and the release of the
// owner's hold are one script, held by the replicas a failover may
// promote before it returns. It lets go of what this process knows of the
// session's log (its high-water mark, its generation, its pipeline state):
// a hibernated session keeps nothing in this process, and another replica
// may wake the session and append to it before this one wakes it again.
func (s *Store) Hibernate(ctx context.Context, token, owner string, gen uint64, state []byte) error {
	defer s.barrier(ctx, token)()
	_, err := s.runReplicated(ctx, s.scripts.hibernate, "hibernate", token, gen,
		strconv.FormatUint(gen, 10), owner, string(state))
	return err
}

// Wake implements store.Sessions: a compare-and-set of the owner, from
// none, at an unchanged generation, in one script. The session's next
// append learns the high-water mark from Redis, as after Claim: the
// generation is the same, but another replica may have appended to it
// since this process last held it.
func (s *Store) Wake(ctx context.Context, token, owner string, gen uint64, leaseUntil time.Time) (store.Record, error) {
	defer s.barrier(ctx, token)()
	rest, err := s.runReplicated(ctx, s.scripts.wake, "wake", token, gen,
		strconv.FormatUint(gen, 10), owner, encTime(leaseUntil))
	if err != nil {
		return store.Record{}, err
	}
	return pairsRecord(token, rest), nil
}

// Touch implements store.Sessions.
func (s *Store) Touch(ctx context.Context, token string, at time.Time) error {
	_, err := s.run(ctx, s.scripts.touch, "touch", token, 0, encTime(at))
	return err
}

// End implements store.Sessions. The tombstone is a key whose TTL is
// tombstoneUntil − Now (rounded up to a millisecond); a tombstoneUntil not
// after Now leaves no tombstone, so the token is unknown at once.
func (s *Store) End(ctx context.Context, token string, reason store.EndReason, tombstoneUntil time.Time) error {
	defer s.barrier(ctx, token)()
	var ttl int64
	if d := tombstoneUntil.Sub(s.now()); d > 0 {
		ttl = int64((d + time.Millisecond - 1) / time.Millisecond)
	}
	_, err := s.runReplicated(ctx, s.scripts.end, "end", token, 0,
		string(reason), strconv.FormatInt(ttl, 10), strconv.FormatInt(wakeLinger.Milliseconds(), 10))
	if err == nil || endsWrites(err) {
		s.marks.Delete(token)
	}
	return err
}

// decRecord builds a Record from the rec hash (keys.go).
func decRecord(token string, m map[string]string) store.Record {
	return store.Record{
		Token:      token,
		Generation: u64(m["gen"]),
		Owner:      m["owner"],
		LeaseUntil: decTime(m["lease"]),
		UserID:     m["user"],
		State:      bytesOrNil(m["state"]),
		Created:    decTime(m["created"]),
		LastSeen:   decTime(m["seen"]),
		Openings:   decOpenings(m["open"]),
	}
}

// decOpenings decodes the rec's open field (trimLua): a JSON array of
// [STREAM, DATA] string pairs, DATA "" for the mark
// (store.Openings.Dropped); nil when empty. The field is written only
// by trimLua, from entries Append wrote: one that does not decode is
// taken as none (the refused resumes of those streams then say nothing
// of their lost requests).
func decOpenings(v string) store.Openings {
	if v == "" {
		return nil
	}
	var pairs [][2]string
	if json.Unmarshal([]byte(v), &pairs) != nil {
		return nil
	}
	out := make(store.Openings, 0, len(pairs))
	for _, p := range pairs {
		n, err := strconv.ParseUint(p[0], 10, 64)
		if err != nil {
			return nil
		}
		out = append(out, store.Opening{Stream: n, Data: []byte(p[1])})
	}
	return out
}
