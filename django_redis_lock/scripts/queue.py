"""The scripts of a lock on one server (or a Sentinel or cluster primary): grants, the FIFO
queue of waiters, hand-overs, release, extend, and the reads of listings."""

from __future__ import annotations

from django_redis_lock.scripts.stats import STATS_LUA, counted_lua
from django_redis_lock.validation import MAX_TIMEOUT

# Waiters behind the first look again after this part of the hand-over lease, so that the
# one that becomes first after a hand-over looks at the new lease in time by itself.
_NEXT_WAITER_SLICE = 0.8
_LEASE_MARK = "__HANDOVER_LEASE_MS__"
_SLICE_MARK = "__NEXT_WAITER_SLICE_MS__"

# Helpers of every script that may grant or free a lock. They come after a script's fast path
# for a lock nobody waits for, which then skips defining them (each definition costs time on
# every call); that path repeats the few lines of grant() or tombstone() it needs.
#: The lease constants and the server's clock, which semaphores' scripts share.
CLOCK_LUA = (
    f"local HANDOVER_LEASE_MS = {_LEASE_MARK}\n"
    f"local NEXT_WAITER_SLICE_MS = {_SLICE_MARK}\n"
    + """
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
"""
)
_PRELUDE = (
    CLOCK_LUA
    + """
-- ``last``: the lock's last token if read already (false: none), nil to read it here;
-- ``released``: the secret of the hold released just before (field r), if any.
local function grant(lock, secret, ttl, owner, label, now, last, released)
  if last == nil then last = redis.call('HGET', lock, 't') end
  last = tonumber(last or '') or 0  -- a token someone else wrote may be any text
  if not (last >= 0 and last < 9e15) then last = 0 end  -- NaN too
  local token = math.max(last + 1, now)
  local at = string.format('%d', now)
  if released then
    redis.call('HSET', lock, 's', secret, 't', string.format('%d', token), 'o', owner,
               'l', label, 'a', at, 'r', released)
  else
    redis.call('HSET', lock, 's', secret, 't', string.format('%d', token), 'o', owner,
               'l', label, 'a', at)
  end
  redis.call('PEXPIRE', lock, ttl)
  return token
end

-- A released lock keeps only its token, for a while.
local function tombstone(lock, ms)
  redis.call('HDEL', lock, 's', 'o', 'l', 'a')
  redis.call('PEXPIRE', lock, ms)
end
"""
)

#: The grant and tombstone helpers (after the clock), which multi-name locks' scripts share.
PRELUDE_LUA = _PRELUDE

#: The queue's helpers (waiter entries, the queue's order), which semaphores' scripts share.
QUEUE_PRELUDE_LUA = """
-- Tell a waiter's process: on its channel, or, for a channel that starts with a NUL byte, on
-- the rest of it with sharded pub/sub (a Redis 7+ cluster: the message stays on this shard;
-- the channel is in this script's slot). pcall: a server without SPUBLISH frees the lock all
-- the same, and its waiter looks again at the end of its wait.
local function wake(channel, message)
  if string.byte(channel, 1) == 0 then
    redis.pcall('SPUBLISH', string.sub(channel, 2), message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

-- Whether a decoded waiter entry is one these scripts write: anything else (another program's
-- value in the waiters hash) is dropped as a dead waiter, never an error for every caller.
local function waiter(entry)
  return type(entry) == 'table' and type(entry.d) == 'number' and type(entry.t) == 'number'
    and entry.t > 0 and type(entry.c) == 'string' and type(entry.o) == 'string'
    and type(entry.l) == 'string' and (entry.w == nil or type(entry.w) == 'number')
    and (entry.n == nil or type(entry.n) == 'number')
    and (entry.k == nil or entry.k == 's' or entry.k == 'r' or entry.k == 'w')
end

-- The first waiter whose deadline has not passed; dead entries in front of it are dropped.
-- ``head``: the queue's first entry if read already.
local function first_live(queue, waiters, now_ms, head)
  while true do
    if not head then head = redis.call('ZRANGE', queue, 0, 0)[1] end
    if not head then return nil end
    local raw = redis.call('HGET', waiters, head)
    if raw then
      local decoded, entry = pcall(cjson.decode, raw)
      if decoded and waiter(entry) and entry.d > now_ms then return head, entry end
    end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', waiters, head)
    head = nil
  end
end

-- Tell the first live waiter it is first now, and in how many ms the lease it waits on
-- ends, unless it looks again before that anyway: it looks again then (the holder may die).
local function nudge_first(queue, waiters, now_ms, lease_ms)
  local secret, entry = first_live(queue, waiters, now_ms)
  if secret and not (entry.w and lease_ms >= 0 and entry.w <= now_ms + lease_ms) then
    wake(entry.c, secret .. ':' .. string.format('%d', math.max(lease_ms, 0)))
  end
end

-- Give the free lock to the first live waiter and tell its process; false if nobody waits.
-- ``last``, ``released``: as grant() takes them; ``head``: as first_live() does.
local function hand_over(lock, queue, waiters, now, last, released, head)
  local now_ms = math.floor(now / 1000)
  local secret, entry = first_live(queue, waiters, now_ms, head)
  if not secret then return false end
  redis.call('ZREM', queue, secret)
  redis.call('HDEL', waiters, secret)
  local lease = math.min(entry.t, HANDOVER_LEASE_MS)
  local token = grant(lock, secret, lease, entry.o, entry.l, now, last, released)
  wake(entry.c, secret .. ':' .. string.format('%d', token) .. ':' .. string.format('%d', now))
  -- The next waiter was never first, so it looks again within NEXT_WAITER_SLICE_MS anyway:
  -- only a shorter lease needs telling. The grant reaches its waiter when this script ends.
  -- (A server clock that stepped back can reorder the queue: a waiter may then look again
  -- later than the lease ends, as long as its own wait; it misses no grant.)
  if lease < NEXT_WAITER_SLICE_MS then nudge_first(queue, waiters, now_ms, lease) end
  return true
end

-- After a release: the next waiter gets the lock (2), or it becomes a tombstone (1).
local function free(lock, queue, waiters, now, tombstone_ms)
  if hand_over(lock, queue, waiters, now) then return 2 end
  tombstone(lock, tombstone_ms)
  return 1
end

-- Queue ``secret`` in arrival order (``entry``: what a grant to it needs) and return how long
-- it waits before it looks again: the first (``head`` is it, or nobody) until the lease it
-- found (``left`` ms, -1: none) ends, in case the holder died; the others
-- NEXT_WAITER_SLICE_MS at most, as one of them may be first by then. The entry outlives the
-- wait by ``grace`` ms, for a grant on its way.
local function enqueue(queue, waiters, secret, entry, head, left, wait, grace, now)
  if not head or head == secret then
    if left >= 0 and wait > left then wait = left end
  elseif wait > NEXT_WAITER_SLICE_MS then
    wait = NEXT_WAITER_SLICE_MS
  end
  local now_ms, keep = math.floor(now / 1000), wait + grace
  redis.call('ZADD', queue, 'NX', string.format('%d', now), secret)
  entry.d, entry.w = now_ms + keep, now_ms + wait
  redis.call('HSET', waiters, secret, cjson.encode(entry))
  if redis.call('PTTL', queue) < keep then
    redis.call('PEXPIRE', queue, keep)
    redis.call('PEXPIRE', waiters, keep)
  end
  return wait
end
"""

# KEYS: lock, queue, waiters, stats
# ARGV: secret, ttl ms, owner, label, wait ms (0: do not queue, and leave the queue; n: queue,
#       and wait at most n ms for a grant before trying again), channel, grace ms, count busy
#       ('1': count a busy answer in the statistics)
# Returns the fencing token (an integer) when acquired (also when handed over to this secret
# earlier, then with the lease made at least ttl; one integer parses quicker than an array),
# else {ms left of the holder's lease, ms to wait before trying again, ms the holder has held
# it (-1: unknown)}: the first waiter tries again when the lease ends, in case the holder died;
# the others after NEXT_WAITER_SLICE_MS at most (one of them may be first by then), unless a
# release hands them the lock before.
ACQUIRE = (
    """
local lock, queue, waiters = KEYS[1], KEYS[2], KEYS[3]
local secret, ttl = ARGV[1], tonumber(ARGV[2])
local held = redis.call('HMGET', lock, 's', 't')
local holder = held[1]
-- Free, and nobody waits. A tombstone (a token, no secret) says so itself: a release leaves
-- one only when nobody waits, and nobody queues for a free lock. Without one (the lease ran
-- out, or the lock is new) the queue may hold waiters that go first.
if not holder and (held[2] or redis.call('EXISTS', queue) == 0) then
  -- grant() inline: this path runs before any helper is defined, which costs time per call.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(held[2] or '') or 0  -- as in grant(): any text, or absurdly large
  if not (last >= 0 and last < 9e15) then last = 0 end  -- NaN too
  local token = math.max(last + 1, now)
  redis.call('HSET', lock, 's', secret, 't', string.format('%d', token), 'o', ARGV[3],
             'l', ARGV[4])
  -- The start time is the token unless tokens ran ahead of the clock: only then stored apart
  -- (the reads fall back to t; a free lock's hash has no a left from an earlier hold).
  if token ~= now then redis.call('HSET', lock, 'a', string.format('%d', now)) end
  redis.call('PEXPIRE', lock, ttl)
  return token
end
"""
    + _PRELUDE
    + QUEUE_PRELUDE_LUA
    + STATS_LUA
    + """
if holder == secret then
  if redis.call('PTTL', lock) < ttl then redis.call('PEXPIRE', lock, ttl) end
  return tonumber(redis.call('HGET', lock, 't'))
end
local now = now_us()
if not holder then
  local head = first_live(queue, waiters, math.floor(now / 1000))
  if not head or head == secret then
    local token = grant(lock, secret, ttl, ARGV[3], ARGV[4], now)
    if head then  -- the first waiter took it when the lease ran out, not from a release
      redis.call('ZREM', queue, secret)
      redis.call('HDEL', waiters, secret)
      -- The next waiter is first now, and looks again within NEXT_WAITER_SLICE_MS: as after
      -- a hand-over, a shorter lease is told, so a holder that dies is replaced at its end.
      if ttl < NEXT_WAITER_SLICE_MS then
        nudge_first(queue, waiters, math.floor(now / 1000), ttl)
      end
    end
    return token
  end
  -- A lease ran out with waiters queued: the first of them goes before this caller.
  hand_over(lock, queue, waiters, now)
end
local left = redis.call('PTTL', lock)
-- Busy: counted once per acquire (ARGV[8] '1' on its first attempt); the holder's hold so far.
if ARGV[8] == '1' then pcall(count, KEYS[4], 'b') end
local since = redis.call('HMGET', lock, 'a', 't')  -- no a: the hold began at its token
local started = tonumber(since[1] or since[2] or '')
local elapsed = started and math.floor(math.max(now - started, 0) / 1000) or -1
local wait = tonumber(ARGV[5])
if wait == 0 then
  if redis.call('ZREM', queue, secret) == 1 then
    redis.call('HDEL', waiters, secret)
    nudge_first(queue, waiters, math.floor(now / 1000), left)  -- it may have waited behind us
  end
  return {left, 0, elapsed}
end
local head = first_live(queue, waiters, math.floor(now / 1000))
local entry = {t = ttl, o = ARGV[3], l = ARGV[4], c = ARGV[6]}
wait = enqueue(queue, waiters, secret, entry, head, left, wait, tonumber(ARGV[7]), now)
return {left, wait, elapsed}
"""
)

# KEYS: lock, queue, waiters, stats
# ARGV: secret, tombstone ms, record ('1': record the hold in the statistics), the acquire's
#       wait ms, the lock's timeout ms
# Returns 1 when released, 2 when released and handed to a waiter, 3 when this secret released
# the lock already (a retry after a lost reply: field ``r`` keeps the last secret released by
# its holder, until the next release or the key's end), 0 when the secret does not hold it
# (counted as a lost hold, or as a forced one when an operator released it).
RELEASE = (
    STATS_LUA
    + """
local held = redis.call('HMGET', KEYS[1], 's', 'r', 'a', 't')
if held[1] ~= ARGV[1] then
  if held[2] == ARGV[1] then return 3 end
  if ARGV[3] == '1' then pcall(count_gone, KEYS[4], KEYS[1], ARGV[1]) end
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
record_release(held[3] or held[4], now)
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if not head then  -- nobody waits: tombstone() inline
  redis.call('HSET', KEYS[1], 'r', ARGV[1])
  redis.call('HDEL', KEYS[1], 's', 'o', 'l', 'a')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
"""
    + _PRELUDE
    + QUEUE_PRELUDE_LUA
    + """
-- The grant sets r in the same command; the lock's token was read above.
if hand_over(KEYS[1], KEYS[2], KEYS[3], now, held[4], ARGV[1], head) then return 2 end
redis.call('HSET', KEYS[1], 'r', ARGV[1])
tombstone(KEYS[1], ARGV[2])
return 1
"""
)

# KEYS: lock, queue, waiters
# ARGV: tombstone ms, fencing token of the hold to release ('': whichever holds it)
# Returns what was released: {token, owner, label, acquired-at, 1 or 2 as RELEASE}; or an
# empty array when nobody holds the lock, or another hold than the token's does. Tokens are
# compared as numbers: a token written by someone else as '0005' is the hold listed as 5.
FORCE_RELEASE = (
    _PRELUDE
    + QUEUE_PRELUDE_LUA
    + """
local held = redis.call('HMGET', KEYS[1], 's', 't', 'o', 'l', 'a')
if not held[1] then return {} end
if ARGV[2] ~= '' then
  local token = tonumber(held[2] or '')
  if not token or token ~= tonumber(ARGV[2]) then return {} end
end
local how = free(KEYS[1], KEYS[2], KEYS[3], now_us(), ARGV[1])
redis.call('HSET', KEYS[1], 'f', held[1])  -- its holder learns it from an operator, not a loss
return {held[2], held[3], held[4], held[5] or held[2], how}
"""
)

# KEYS: lock, queue, waiters
# ARGV: secret, tombstone ms
# For an acquire attempt whose outcome its caller never learned (interrupted, cancelled, or
# the reply lost): frees the lock if the attempt got it (1 or 2 as RELEASE), else takes the
# secret out of the queue (0). Unlike RELEASE it leaves no ``r``: that secret's holder never
# knew it held the lock, so nobody may release it quietly later.
LEAVE = (
    _PRELUDE
    + QUEUE_PRELUDE_LUA
    + """
local now = now_us()
if redis.call('HGET', KEYS[1], 's') == ARGV[1] then
  return free(KEYS[1], KEYS[2], KEYS[3], now, ARGV[2])
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[3], ARGV[1])
  nudge_first(KEYS[2], KEYS[3], math.floor(now / 1000), redis.call('PTTL', KEYS[1]))
end
return 0
"""
)

# KEYS: lock, stats (optional)
# ARGV: secret, ms, mode ('add': ms more, at most MAX_TIMEOUT in all; 'replace': exactly ms;
#       'atleast': at least ms; 'check': change nothing), record ('1': count a hold found gone
#       as lost, or as forced when an operator released it; except 'check'), and optionally
#       an owner and a label that the hold takes (a unique task's key, passed from the
#       enqueuer to the worker)
# Returns the lease left in ms (1 for 'check'), or 0 when the secret does not hold the lock.
EXTEND = (
    f"local MAX_TIMEOUT_MS = {MAX_TIMEOUT * 1000}\n"
    + """
local held = redis.call('HMGET', KEYS[1], 's', 'f')
if held[1] ~= ARGV[1] then
  if ARGV[4] == '1' and ARGV[3] ~= 'check' and KEYS[2] then
    pcall(function()  -- gone: forced by an operator ('f'), else lost ('l')
"""
    + counted_lua("KEYS[2]", "held[2] == ARGV[1] and 'f' or 'l'", "      ")
    + """
    end)
  end
  return 0
end
if ARGV[5] then redis.call('HSET', KEYS[1], 'o', ARGV[5], 'l', ARGV[6]) end
if ARGV[3] == 'check' then return 1 end
local ms, mode = tonumber(ARGV[2]), ARGV[3]
local left = redis.call('PTTL', KEYS[1])
if mode == 'add' then
  ms = math.min(ms + math.max(left, 0), MAX_TIMEOUT_MS)  -- no lease past the documented cap
elseif mode == 'atleast' and left >= ms then
  return left
end
redis.call('PEXPIRE', KEYS[1], ms)
return ms
"""
)

# KEYS: lock keys (any number; this reads many in one round trip, for listing)
# ARGV: none
# Returns one JSON array (one string to parse beats thousands of replies), six values per key:
# secret (false for a tombstone or no key), token, owner, label, acquired-at (strings, so no
# digit of the token is lost), and the PTTL.
READ = """
local out = {}
for i, key in ipairs(KEYS) do
  -- A key of another type that happens to match reads as no lock, not as an error.
  local fields = redis.pcall('HMGET', key, 's', 't', 'o', 'l', 'a')
  if fields.err then fields = {false, false, false, false, false} end
  local at = (i - 1) * 6
  for j = 1, 5 do out[at + j] = fields[j] end
  if fields[1] and not fields[5] then out[at + 5] = fields[2] end  -- began at its token
  out[at + 6] = redis.call('PTTL', key)
end
return cjson.encode(out)
"""


def with_lease(source: str, handover_lease_ms: int) -> str:
    """``source`` with the hand-over lease (and the waiters' slice derived from it) built in."""
    slice_ms = max(1, int(handover_lease_ms * _NEXT_WAITER_SLICE))
    return source.replace(_LEASE_MARK, str(handover_lease_ms)).replace(_SLICE_MARK, str(slice_ms))
