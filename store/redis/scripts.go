package redis

import "github.com/redis/go-redis/v9"

// The Lua scripts below are every write of a session or a task record
// (the task's working index is written by plain commands: tasks.go).
// Redis runs a script atomically (no other command runs in between),
// which is where the store's fencing lives: each script reads the
// record's generation, or a task's revision, and writes only if it is the
// one the caller carried, in one step. Scripts are sent by SHA (EVALSHA)
// and re-sent in full after a Redis restart emptied the script cache
// (go-redis Script.Run does this on NOSCRIPT).
//
// Every session script declares the same five keys (keys.all): KEYS[1]
// rec, KEYS[2] log, KEYS[3] wake, KEYS[4] tomb, KEYS[5] opens, starts
// with the Store's expiry header, and calls keep(k) after its write
// (expiry.go), k being the key the write can create: the wake stream for
// the scripts that poke it, the log or the open set for an append, else
// the record.
//
// Over maxmemory (under noeviction, or a volatile policy with nothing
// left to evict) Redis refuses a script only at its first write, and
// only when that command can grow memory (HSET, XADD, SET; not DEL,
// XTRIM, PEXPIRE): from then on the script writes on, past maxmemory. So
// a script that adds data makes such a command its first write
// (createLua), and Redis refuses it before it writes anything; endLua
// starts by deleting the session's keys, which frees more than the
// tombstone it writes takes, and runs. (Redis 7's script flags, a
// "#!lua" first line, would have Redis refuse a writing script up front,
// but such a script does not load on Redis 6.2, which XTRIM MINID needs
// and the store otherwise runs on.)
//
// Replies are arrays whose first element is a status: "ok", "notfound",
// "ended" TOMBSTONE, "fenced" GEN, "exists" WHY. A task script declares
// one key, the task's hash (taskKey), and replies "ok" REV, "notfound", "stale" REV (the stored
// revision) or "exists". Numbers travel as decimal strings: Lua numbers
// are doubles, exact for sequences, generations, revisions and byte
// counts below 2^53, and string.format('%d') keeps them out of exponent
// notation.

// prelude is shared by every session script.
const prelude = `
local rec, log, wake, tomb, opens = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local function gone()
  local r = redis.call('GET', tomb)
  if r then return {'ended', r} end
  return {'notfound'}
end
local function int(n) return string.format('%d', n) end
local function bounds()
  local h = redis.call('HMGET', rec, 'gen', 'floor', 'vis', 'cum', 'base', 'oldest', 'hwm')
  return {'ok', h[1], h[2], h[3] or h[7], h[4], h[5], h[6], h[7]}
end
local function field(entry, name)
  for i = 1, #entry, 2 do
    if entry[i] == name then return entry[i + 1] end
  end
  return ''
end
local function poke(op)
  redis.call('XADD', wake, 'MAXLEN', '1', '*', 'op', op)
end
` + keepLua

// createLua: ARGV gen owner lease user state created seen. Its first
// write is the record's HSET, not the DEL of what an earlier session of
// the token left: over maxmemory, Redis refuses the script at that HSET,
// before it writes anything.
const createLua = prelude + `
if redis.call('EXISTS', rec) == 1 then return {'exists', 'live'} end
if redis.call('EXISTS', tomb) == 1 then return {'exists', 'tombstoned'} end
redis.call('HSET', rec, 'gen', ARGV[1], 'owner', ARGV[2], 'lease', ARGV[3], 'user', ARGV[4],
  'state', ARGV[5], 'created', ARGV[6], 'seen', ARGV[7],
  'floor', '1', 'hwm', '0', 'vis', '0', 'cum', '0', 'base', '0', 'oldest', '')
redis.call('DEL', log, wake, opens)
keep(rec)
return {'ok'}
`

// claimLua: ARGV from owner lease. Compare-and-set of the generation;
// the new generation starts with an empty log and floor = HWM+1.
const claimLua = prelude + `
local h = redis.call('HMGET', rec, 'gen', 'hwm', 'cum')
if not h[1] then return gone() end
if h[1] ~= ARGV[1] then return {'fenced', h[1]} end
redis.call('HINCRBY', rec, 'gen', 1)
redis.call('HSET', rec, 'owner', ARGV[2], 'lease', ARGV[3],
  'floor', int(tonumber(h[2]) + 1), 'vis', h[2], 'base', h[3], 'oldest', '')
redis.call('HDEL', rec, 'open')
redis.call('DEL', log, opens)
poke('claim')
keep(wake)
local r = redis.call('HGETALL', rec)
table.insert(r, 1, 'ok')
return r
`

// renewLua: ARGV gen owner lease.
const renewLua = prelude + `
local h = redis.call('HMGET', rec, 'gen', 'owner')
if not h[1] then return gone() end
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return {'fenced', h[1]} end
redis.call('HSET', rec, 'lease', ARGV[3])
keep(rec)
return {'ok'}
`

// saveStateLua: ARGV gen state.
const saveStateLua = prelude + `
local g = redis.call('HGET', rec, 'gen')
if not g then return gone() end
if g ~= ARGV[1] then return {'fenced', g} end
redis.call('HSET', rec, 'state', ARGV[2])
keep(rec)
return {'ok'}
`

// hibernateLua: ARGV gen owner state. The owner lets go of its
// generation: the record keeps it, its log and the saved state, with no
// owner and no lease.
const hibernateLua = prelude + `
local h = redis.call('HMGET', rec, 'gen', 'owner')
if not h[1] then return gone() end
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return {'fenced', h[1]} end
redis.call('HSET', rec, 'state', ARGV[3], 'owner', '', 'lease', '')
keep(rec)
return {'ok'}
`

// wakeLua: ARGV gen owner lease. Takes a record nobody holds at the same
// generation; its log stays.
const wakeLua = prelude + `
local h = redis.call('HMGET', rec, 'gen', 'owner')
if not h[1] then return gone() end
if h[1] ~= ARGV[1] or h[2] ~= '' then return {'fenced', h[1]} end
redis.call('HSET', rec, 'owner', ARGV[2], 'lease', ARGV[3])
keep(rec)
local r = redis.call('HGETALL', rec)
table.insert(r, 1, 'ok')
return r
`

// touchLua: ARGV at (Unix nanoseconds, or "" for the zero time).
// LastSeen only moves forward; later() compares decimal integers as
// strings, since Unix nanoseconds exceed a double's exact range.
const touchLua = prelude + `
local function later(a, b)
  if a == b or a == '' then return false end
  if b == '' then return true end
  local na, nb = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if na ~= nb then return nb end
  if #a ~= #b then
    if na then return #a < #b end
    return #a > #b
  end
  if na then return a < b end
  return a > b
end
local seen = redis.call('HGET', rec, 'seen')
if not seen then return gone() end
if later(ARGV[1], seen) then redis.call('HSET', rec, 'seen', ARGV[1]) end
keep(rec)
return {'ok'}
`

// endLua: ARGV reason tombstoneTTL(ms, 0 = none) wakeLinger(ms).
// The tombstone holds the reason and the record's user (keys.go,
// encTomb), read from the record in the same step that deletes it. The
// wake stream outlives the record briefly so that waiters see the end.
const endLua = prelude + `
if redis.call('EXISTS', rec) == 0 then
  if redis.call('EXISTS', tomb) == 1 then return {'ok'} end
  return {'notfound'}
end
local t, user = ARGV[1], redis.call('HGET', rec, 'user')
if user and user ~= '' then t = t .. ' ' .. user end
redis.call('DEL', rec, log, opens)
if tonumber(ARGV[2]) > 0 then redis.call('SET', tomb, t, 'PX', ARGV[2]) end
poke('end')
redis.call('PEXPIRE', wake, ARGV[3])
return {'ok'}
`

// appendLua: ARGV gen n acked visible, then per event: stream kind end
// retry time data; kind, end and retry are left out of an entry when all
// three are "0" (keys.go). A stream of "" marks an event that opens a stream
// (store.NewStream): its stream number is its own sequence. Events get
// HWM+1, HWM+2, … as entry IDs, and the record's HWM and byte count move
// in the same step; the visible HWM too when visible is "1", else later
// (publishLua, once replicas hold the events). acked is the highest
// sequence of this generation this writer had held by the replicas
// (guardLua).
const appendLua = prelude + guardLua + `
local h = redis.call('HMGET', rec, 'gen', 'hwm', 'cum', 'floor')
if not h[1] then return gone() end
if h[1] ~= ARGV[1] then return {'fenced', h[1]} end
local lost = guard(ARGV[3])
if lost then return lost end
h = redis.call('HMGET', rec, 'gen', 'hwm', 'cum', 'floor')
local n = tonumber(ARGV[2])
if n == 0 then
  keep(rec)
  return bounds()
end
local hwm, cum = tonumber(h[2]), tonumber(h[3])
local fresh = hwm < tonumber(h[4])
local added, live = {}, 0
if fresh then
  redis.call('HSET', rec, 'oldest', ARGV[9])
end
for i = 0, n - 1 do
  local b = 5 + i * 6
  hwm = hwm + 1
  cum = cum + #ARGV[b + 5] + 64
  local seq = int(hwm)
  local stream = ARGV[b]
  if stream == '' then stream = seq end
  if ARGV[b + 1] == '0' and ARGV[b + 2] == '0' and ARGV[b + 3] == '0' then
    redis.call('XADD', log, seq .. '-0', 'gen', h[1], 'stream', stream,
      'time', ARGV[b + 4], 'data', ARGV[b + 5], 'cum', int(cum))
  else
    redis.call('XADD', log, seq .. '-0', 'gen', h[1], 'stream', stream, 'kind', ARGV[b + 1],
      'end', ARGV[b + 2], 'retry', ARGV[b + 3], 'time', ARGV[b + 4], 'data', ARGV[b + 5], 'cum', int(cum))
    if ARGV[b + 2] == '1' then
      redis.call('ZREM', opens, stream)
      if added[stream] then
        added[stream], live = nil, live - 1
      end
    elseif ARGV[b + 1] == '1' and stream == seq and #ARGV[b + 5] > 0 then
      redis.call('ZADD', opens, hwm, seq)
      added[seq], live = true, live + 1
    end
  end
end
redis.call('HSET', rec, 'hwm', int(hwm), 'cum', int(cum))
if ARGV[4] == '1' then redis.call('HSET', rec, 'vis', int(hwm)) end
-- The keys this append can create: the open set, when a stream it
-- opened is still open (live), and the log, when the record held no
-- entry of its generation (fresh: after create, claim or a lost
-- guard, which delete the log).
if live > 0 then keep(opens) end
if fresh or live == 0 then keep(log) end
return bounds()
`

// trimLua: ARGV gen floor maxOpenings maxOpeningBytes. Raises the floor
// to min(floor, HWM+1) and removes the entries below it; base becomes the
// cum of the last removed entry, and oldest the time of the new first
// one. In the same step it keeps the record's openings
// (store.Record.Openings) in the rec's open field, a JSON array of
// [STREAM, DATA] string pairs by ascending stream (no field when there
// are none): the openings of the streams in opens (appendLua: opened,
// end not appended) whose opening entry this trim removes are added, at
// most ARGV[3] of them, the oldest going first, and none with data
// longer than ARGV[4] bytes (store.MaxOpenings, store.MaxOpeningBytes);
// those whose stream is no longer in opens (its end is stored) go. So
// a trim reads the few entries that open streams, never every entry it
// removes.
const trimLua = prelude + `
local h = redis.call('HMGET', rec, 'gen', 'hwm', 'floor', 'cum')
if not h[1] then return gone() end
if h[1] ~= ARGV[1] then return {'fenced', h[1]} end
local hwm, cur = tonumber(redis.call('HGET', rec, 'vis') or h[2]), tonumber(h[3])
local nf = tonumber(ARGV[2])
if nf > hwm + 1 then nf = hwm + 1 end
if nf <= cur then return bounds() end
local maxOpen, maxBytes = tonumber(ARGV[3]), tonumber(ARGV[4])
local stored = redis.call('HGET', rec, 'open')
local open, changed, mark = {}, false, 0
if stored then
  for _, o in ipairs(cjson.decode(stored)) do
    if o[2] == '' then
      mark = tonumber(o[1])
    elseif redis.call('ZSCORE', opens, o[1]) then
      table.insert(open, o)
    else
      changed = true
    end
  end
end
for _, st in ipairs(redis.call('ZRANGEBYSCORE', opens, int(cur), int(nf - 1))) do
  local e = redis.call('XRANGE', log, st, st)
  if #e > 0 then
    local data = field(e[1][2], 'data')
    local dropped = tonumber(st)
    if #data <= maxBytes then
      table.insert(open, {st, data})
      dropped = 0
      if #open > maxOpen then dropped = tonumber(table.remove(open, 1)[1]) end
    end
    if dropped > mark then mark = dropped end
    changed = true
  end
end
if changed then
  if mark > 0 then
    local at = #open + 1
    for i, o in ipairs(open) do
      if tonumber(o[1]) > mark then at = i break end
    end
    table.insert(open, at, {int(mark), ''})
  end
  if #open == 0 then
    redis.call('HDEL', rec, 'open')
  else
    redis.call('HSET', rec, 'open', cjson.encode(open))
  end
end
local last = redis.call('XRANGE', log, int(nf - 1), int(nf - 1))
local base = h[4]
if #last > 0 then base = field(last[1][2], 'cum') end
local oldest = ''
if nf <= hwm then
  local first = redis.call('XRANGE', log, int(nf), int(nf))
  if #first > 0 then oldest = field(first[1][2], 'time') end
end
redis.call('XTRIM', log, 'MINID', int(nf) .. '-0')
redis.call('HSET', rec, 'floor', int(nf), 'base', base, 'oldest', oldest)
poke('trim')
keep(wake)
return bounds()
`

// announceFirstLua sets KEYS[1] (a replica's directory entry) to ARGV[1]
// (its URL) for ARGV[2] milliseconds unless it holds another URL, which it
// returns; ” when set.
const announceFirstLua = `
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then
  return v
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
`

// publishLua: ARGV gen hwm. Makes the events up to hwm visible to
// readers (the rec's vis field) once they are replicated (replicate.go),
// and wakes waiters.
const publishLua = prelude + `
local h = redis.call('HMGET', rec, 'gen', 'vis', 'hwm')
if not h[1] then return gone() end
if h[1] ~= ARGV[1] then return {'fenced', h[1]} end
local to = math.min(tonumber(ARGV[2]), tonumber(h[3]))
if tonumber(h[2] or '0') < to then
  redis.call('HSET', rec, 'vis', int(to))
  poke('publish')
  keep(wake)
end
return bounds()
`

// taskPrelude is shared by the task scripts. held(want) returns the
// task's revision when the hash exists and its revision is want, else
// nil and the reply to give.
const taskPrelude = `
local task = KEYS[1]
local function held(want)
  local rev = redis.call('HGET', task, 'rev')
  if not rev then return nil, {'notfound'} end
  if rev ~= want then return nil, {'stale', rev} end
  return rev
end
`

// createTaskLua: ARGV data expiry (Unix ms). Revision 1.
const createTaskLua = taskPrelude + `
if redis.call('EXISTS', task) == 1 then return {'exists'} end
redis.call('HSET', task, 'rev', '1', 'data', ARGV[1])
redis.call('PEXPIREAT', task, ARGV[2])
return {'ok', '1'}
`

// updateTaskLua: ARGV rev data expiry (Unix ms). A compare-and-set of the
// revision; the expiry is set again, since a task's TTL can grow.
const updateTaskLua = taskPrelude + `
local rev, refused = held(ARGV[1])
if not rev then return refused end
local nrev = string.format('%d', tonumber(rev) + 1)
redis.call('HSET', task, 'rev', nrev, 'data', ARGV[2])
redis.call('PEXPIREAT', task, ARGV[3])
return {'ok', nrev}
`

// deleteTaskLua: ARGV rev.
const deleteTaskLua = taskPrelude + `
local rev, refused = held(ARGV[1])
if not rev then return refused end
redis.call('DEL', task)
return {'ok', rev}
`

// scripts holds one compiled (hashed) copy of each script per Store.
type scripts struct {
	create, claim, renew, saveState, hibernate, wake, touch, end, append, trim, publish, announceFirst *redis.Script

	createTask, updateTask, deleteTask *redis.Script
}

// newScripts compiles the scripts, the session scripts with e's header
// (keepLua).
func newScripts(e expiry) scripts {
	h := e.header()
	return scripts{
		create:    redis.NewScript(h + createLua),
		claim:     redis.NewScript(h + claimLua),
		renew:     redis.NewScript(h + renewLua),
		saveState: redis.NewScript(h + saveStateLua),
		hibernate: redis.NewScript(h + hibernateLua),
		wake:      redis.NewScript(h + wakeLua),
		touch:     redis.NewScript(h + touchLua),
		end:       redis.NewScript(h + endLua),
		append:    redis.NewScript(h + appendLua),
		trim:      redis.NewScript(h + trimLua),
		publish:   redis.NewScript(h + publishLua),

		announceFirst: redis.NewScript(announceFirstLua),

		createTask: redis.NewScript(createTaskLua),
		updateTask: redis.NewScript(updateTaskLua),
		deleteTask: redis.NewScript(deleteTaskLua),
	}
}
