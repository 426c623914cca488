// expiry.go holds the expiry Redis gives every key of a session, so that
// a session no replica holds any more (its owner died, its hand-over at
// shutdown failed, it hibernated on a replica that went away) leaves
// Redis by itself once it has been idle past the idle TTL: no replica
// indexes it, and no command scans the key space for it.

package redis

import (
	"fmt"
	"time"
)

// Defaults of Options.IdleTTL and Options.IdleMargin.
const (
	// DefaultIdleTTL matches session.DefaultIdleTTL: 30 minutes.
	DefaultIdleTTL = 30 * time.Minute
	// DefaultIdleMargin is the default Options.IdleMargin: 1 minute, well
	// above tidemark serve's sweep interval (at most 10 s by default) and
	// lease renewals (3 s by default).
	DefaultIdleMargin = time.Minute
)

// keyTail is how much later than the record the other keys of a session
// (log, wake, open) expire. Redis takes a key whose expiry has passed as
// missing from that moment, so with the record always the first to go a
// read never finds the record without its log (which would answer 409
// logLost for a session that is gone): it finds no record, and the token
// answers 404.
const keyTail = time.Second

// expiry is what the session scripts give each key (keepLua).
type expiry struct {
	// keep is the least time a session's record outlives the last write
	// to it; 0: keys never expire.
	keep time.Duration
	// step is how much longer than keep a write sets, so that the writes
	// that follow within step (a busy session's appends) find the expiry
	// far enough and set none: Redis then replicates and logs (AOF) no
	// PEXPIRE for them. A record abandoned after its last write goes
	// between keep and keep + step after it.
	step time.Duration
}

// newExpiry returns the expiry for Options.IdleTTL and IdleMargin (zero:
// their defaults; a negative IdleTTL: none). keep is idleTTL + idleTTL/4
// + margin: the registry writes a session's LastSeen at most every
// quarter of the idle TTL (session.Live.Touch), so its last write can
// precede its last request by that much, and its owner's sweep ends it
// up to one sweep interval after its idle TTL, which margin covers.
func newExpiry(idleTTL, margin time.Duration) expiry {
	if idleTTL < 0 {
		return expiry{}
	}
	if idleTTL == 0 {
		idleTTL = DefaultIdleTTL
	}
	if margin <= 0 {
		margin = DefaultIdleMargin
	}
	keep := idleTTL + idleTTL/4 + margin
	return expiry{keep: keep, step: keep / 8}
}

// header returns the Lua line that every session script starts with: the
// milliseconds keepLua uses. A Store's scripts carry its own values, so
// Stores with different idle TTLs run scripts of different SHAs.
func (e expiry) header() string {
	return fmt.Sprintf("local keepms, stepms, tailms = %d, %d, %d\n",
		e.keep.Milliseconds(), e.step.Milliseconds(), keyTail.Milliseconds())
}

// keepLua defines keep(k), which every session script but endLua calls
// after its write (endLua removes the keys, and the tombstone and the
// wake stream it leaves have TTLs of their own), with k the key the write
// may have created, else the record. The keys of a session get their
// expiry together: the record keep + step, the others that plus the
// tail, and a key created between two such pushes the record's PTTL plus
// the tail. So every key of a session shares one deadline (the record's
// tail earlier), and k's PTTL (a read: nothing replicated) tells whether
// all need setting: less than keep left on the record, or keep + tail on
// another key, pushes all; -1 on another key (the script just created it)
// gives it the record's remaining time plus the tail, or pushes all when
// the record has less than keep left. So every key of a session expires,
// the record first, at least keep after the last write, at the cost of
// one PTTL per write while the deadline is far.
const keepLua = `
local function keep(k)
  if keepms <= 0 then return end
  local t = redis.call('PTTL', k)
  if t == -2 then return end
  if k == rec then
    if t >= keepms then return end
  elseif t >= keepms + tailms then
    return
  elseif t == -1 then
    local r = redis.call('PTTL', rec)
    if r >= keepms then
      redis.call('PEXPIRE', k, r + tailms)
      return
    end
  end
  redis.call('PEXPIRE', rec, keepms + stepms)
  for _, o in ipairs({log, wake, opens}) do
    redis.call('PEXPIRE', o, keepms + stepms + tailms)
  end
end
`
