"""The Lua scripts that make every lock operation a single atomic round trip.

Every lock has four keys sharing one Redis Cluster hash tag (see ``backends.LockKeys``):

``lock``     a hash. While held: ``s`` secret of the holder's acquisition, ``t`` fencing token,
             ``o`` owner, ``l`` label, ``a`` acquired-at (server clock, microseconds); its PTTL
             is the lease. Once released only ``t`` stays, as a short-lived tombstone that
             keeps the fencing token increasing, with ``r``, the secret of the last hold its
             holder released (so that a retried release is recognised), and ``f``, the secret
             of the last hold an operator released (so that its holder's release or renewal,
             which finds it gone, is not counted as a lost hold).
``queue``    a sorted set of waiting secrets, scored by arrival time (microseconds): FIFO order.
``waiters``  a hash: waiting secret -> JSON ``{t: ttl ms, d: deadline ms, w: looks again at
             ms, o, l, c: channel}`` (times by the server clock). A quorum lock's waiters
             (``quorum.py``) do not queue: there it maps an acquire's secret to its channel.
``stats``    a hash: the lock's hold and wait statistics (see ``_STATS`` and ``stats.py``).

Release hands the lock straight to the first live waiter and PUBLISHes the grant on that
waiter's process channel as ``secret:token:acquired_at``, so the next holder needs no round
trip of its own. The first waiter is the one that watches for a holder that died: it looks
again when the lease ends. The others look again every ``NEXT_WAITER_SLICE_MS`` (four fifths
of the hand-over lease), so the waiter that becomes first after a hand-over looks at the new
lease in time anyway; only when it would not (a lease shorter than that) is it sent
``secret:lease_ms`` to look again when the lease ends. Sparing that message spares waking a
third process at the moment the new holder's process needs the CPU.

The hand-over lease is at most ``HANDOVER_LEASE_MS`` (REDIS_LOCK["HANDOVER_LEASE"], built into
the scripts of each backend): the new holder's watchdog lengthens it
to the full TTL at a third of it, as it renews any lease (a short hold is released before that
and costs no extra request), so a waiter that died while queued holds up the others for
seconds, not for a whole TTL. Waiter entries carry a server-side deadline: a
waiter that died or gave up is skipped, and the queue keys expire on their own.

Fencing tokens are ``max(last token + 1, server clock in microseconds)``: strictly increasing
while the tombstone lives, and past it as long as the Redis server's clock does not go back.
"""

from __future__ import annotations

import json
from typing import Any

#: Upper bounds (milliseconds) of the buckets of the hold and wait histograms: 1, 2, 3, 5 and 7
#: in each decade, from 1 ms to 1 h; a value falls in the first bucket whose bound is above it,
#: bucket 0 holds values under 1 ms and the last one values of an hour or more. Memory per
#: name is bounded by these: two histograms and five counters.
_DECADES = (step * 10**decade for decade in range(7) for step in (1, 2, 3, 5, 7))
BOUNDS_MS: tuple[int, ...] = (*(bound for bound in _DECADES if bound < 3_600_000), 3_600_000)
#: How long the statistics of a name live after its last recorded use (seven days)...
STATS_TTL_MS = 7 * 24 * 3600 * 1000
#: ...once it recorded a second hold; before, a day and an hour: long enough for a daily job to
#: come back, short for the many names used once (one per URL or user, say).
FIRST_STATS_TTL_MS = 25 * 3600 * 1000


def _counted(stats: str, field: str, indent: str) -> str:
    """Lua that counts one more of ``field`` in the statistics hash ``stats`` (both Lua
    expressions) and keeps the hash for as long as its holds recorded say (see above)."""
    lines = (
        f"redis.call('HINCRBY', {stats}, {field}, 1)",
        f"local recorded = tonumber(redis.call('HGET', {stats}, 'n') or '') or 0",
        f"redis.call('PEXPIRE', {stats}, recorded > 1 and {STATS_TTL_MS} or {FIRST_STATS_TTL_MS})",
    )
    return "\n".join(indent + line for line in lines)


# Recording into a lock's statistics hash (KEYS[4] of the scripts that record): ``n``
# acquisitions recorded at their release, ``b`` busy answers (an acquire's first), ``l`` lost
# holds (found gone by their holder), ``f`` forced holds (found gone by their holder after an
# operator released them: not a sign of a short timeout), ``m`` the longest hold (ms), ``t``
# the lock's timeout (ms, as last released), ``h<i>``/``w<i>`` the hold and wait histograms'
# buckets. Run through pcall: a statistics key someone else broke never fails a release.
_STATS = (
    "local BOUNDS = {"
    + ", ".join(str(bound) for bound in BOUNDS_MS)
    + "}\n"
    + f"local STATS_TTL_MS, FIRST_STATS_TTL_MS = {STATS_TTL_MS}, {FIRST_STATS_TTL_MS}\n"
    + """
local function bucket(ms)  -- the histogram bucket of a value: the first bound above it
  if ms < 1 then return 0 end
  local lo, hi = 2, #BOUNDS + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ms < BOUNDS[mid] then hi = mid else lo = mid + 1 end
  end
  return lo - 1
end

local function count(stats, field)
"""
    + _counted("stats", "field", "  ")
    + """
end

-- A hold its holder found gone: ``f`` (forced) when an operator released it, else ``l`` (lost).
local function count_gone(stats, lock, secret)
  count(stats, redis.call('HGET', lock, 'f') == secret and 'f' or 'l')
end

-- A hold that lasted hold_ms, after an acquire that waited wait_ms, of a lock whose timeout
-- is ttl_ms. Waits under a millisecond (bucket 0, most of them) are not written: they are
-- the holds recorded less the other waits.
local function record(stats, hold_ms, wait_ms, ttl_ms)
  local recorded = redis.call('HINCRBY', stats, 'n', 1)
  redis.call('HINCRBY', stats, 'h' .. bucket(hold_ms), 1)
  if wait_ms >= 1 then redis.call('HINCRBY', stats, 'w' .. bucket(wait_ms), 1) end
  local seen = redis.call('HMGET', stats, 'm', 't')
  local longest = tonumber(seen[1] or '') or 0
  -- Not what this library writes (inf, nan, below zero, past Lua's exact integers): forgotten.
  if not (longest >= 0 and longest < 9e15) then longest = 0 end
  if hold_ms > longest or tonumber(seen[2] or '') ~= ttl_ms then
    redis.call('HSET', stats, 'm', string.format('%d', math.max(hold_ms, longest)), 't', ttl_ms)
  end
  redis.call('PEXPIRE', stats, recorded > 1 and STATS_TTL_MS or FIRST_STATS_TTL_MS)
end

-- After a release by its holder: record the hold (from its start, ``a``), if asked to
-- (ARGV[3] '1'; ARGV[4] the acquire's wait ms, ARGV[5] the lock's timeout ms).
local function record_release(lock_start, now)
  local started = tonumber(lock_start or '')
  if ARGV[3] ~= '1' or not started then return end
  pcall(record, KEYS[4], math.max(now - started, 0) / 1000, tonumber(ARGV[4]) or 0,
        tonumber(ARGV[5]) or 0)
end
"""
)


# Waiters behind the first look again after this part of the hand-over lease, so that the
# one that becomes first after a hand-over looks at the new lease in time by itself.
_NEXT_WAITER_SLICE = 0.8
_LEASE_MARK = "__HANDOVER_LEASE_MS__"
_SLICE_MARK = "__NEXT_WAITER_SLICE_MS__"

# Helpers of every script that may grant or free a lock. They come after a script's fast path
# for a lock nobody waits for, which then skips defining them (each definition costs time on
# every call); that path repeats the few lines of grant() or tombstone() it needs.
_PRELUDE = (
    f"local HANDOVER_LEASE_MS = {_LEASE_MARK}\n"
    f"local NEXT_WAITER_SLICE_MS = {_SLICE_MARK}\n"
    + """
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ``last``: the lock's last token if read already (false: none), nil to read it here.
local function grant(lock, secret, ttl, owner, label, now, last)
  if last == nil then last = redis.call('HGET', lock, 't') end
  last = tonumber(last or '') or 0  -- a token someone else wrote may be any text
  if last >= 9e15 then last = 0 end
  local token = math.max(last + 1, now)
  redis.call('HSET', lock, 's', secret, 't', string.format('%d', token), 'o', owner,
             'l', label, 'a', string.format('%d', now))
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

_QUEUE_PRELUDE = """
-- The first waiter whose deadline has not passed; dead entries in front of it are dropped.
local function first_live(queue, waiters, now_ms)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then return nil end
    local raw = redis.call('HGET', waiters, head)
    if raw then
      local entry = cjson.decode(raw)
      if entry.d > now_ms then return head, entry end
    end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', waiters, head)
  end
end

-- Tell the first live waiter it is first now, and in how many ms the lease it waits on
-- ends, unless it looks again before that anyway: it looks again then (the holder may die).
local function nudge_first(queue, waiters, now_ms, lease_ms)
  local secret, entry = first_live(queue, waiters, now_ms)
  if secret and not (entry.w and lease_ms >= 0 and entry.w <= now_ms + lease_ms) then
    redis.call('PUBLISH', entry.c, secret .. ':' .. string.format('%d', math.max(lease_ms, 0)))
  end
end

-- Give the free lock to the first live waiter and tell its process; false if nobody waits.
local function hand_over(lock, queue, waiters, now)
  local now_ms = math.floor(now / 1000)
  local secret, entry = first_live(queue, waiters, now_ms)
  if not secret then return false end
  redis.call('ZREM', queue, secret)
  redis.call('HDEL', waiters, secret)
  local lease = math.min(entry.t, HANDOVER_LEASE_MS)
  local token = grant(lock, secret, lease, entry.o, entry.l, now)
  redis.call('PUBLISH', entry.c, secret .. ':' .. string.format('%d', token) .. ':' ..
             string.format('%d', now))
  nudge_first(queue, waiters, now_ms, lease)
  return true
end

-- After a release: the next waiter gets the lock (2), or it becomes a tombstone (1).
local function free(lock, queue, waiters, now, tombstone_ms)
  if hand_over(lock, queue, waiters, now) then return 2 end
  tombstone(lock, tombstone_ms)
  return 1
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
  if last >= 9e15 then last = 0 end
  local token = math.max(last + 1, now)
  redis.call('HSET', lock, 's', secret, 't', string.format('%d', token), 'o', ARGV[3],
             'l', ARGV[4], 'a', string.format('%d', now))
  redis.call('PEXPIRE', lock, ttl)
  return token
end
"""
    + _PRELUDE
    + _QUEUE_PRELUDE
    + _STATS
    + """
if holder == secret then
  if redis.call('PTTL', lock) < ttl then redis.call('PEXPIRE', lock, ttl) end
  return tonumber(redis.call('HGET', lock, 't'))
end
local now = now_us()
if not holder then
  local head = first_live(queue, waiters, math.floor(now / 1000))
  if not head or head == secret then
    if head then
      redis.call('ZREM', queue, secret)
      redis.call('HDEL', waiters, secret)
    end
    return grant(lock, secret, ttl, ARGV[3], ARGV[4], now)
  end
  -- A lease ran out with waiters queued: the first of them goes before this caller.
  hand_over(lock, queue, waiters, now)
end
local left = redis.call('PTTL', lock)
-- Busy: counted once per acquire (ARGV[8] '1' on its first attempt); the holder's hold so far.
if ARGV[8] == '1' then pcall(count, KEYS[4], 'b') end
local started = tonumber(redis.call('HGET', lock, 'a') or '')
local elapsed = started and math.floor(math.max(now - started, 0) / 1000) or -1
local wait = tonumber(ARGV[5])
if wait == 0 then
  if redis.call('ZREM', queue, secret) == 1 then
    redis.call('HDEL', waiters, secret)
    nudge_first(queue, waiters, math.floor(now / 1000), left)  -- it may have waited behind us
  end
  return {left, 0, elapsed}
end
local now_ms = math.floor(now / 1000)
local head = first_live(queue, waiters, now_ms)
if not head or head == secret then  -- first: look again when the lease ends
  if left >= 0 and wait > left then wait = left end
elseif wait > NEXT_WAITER_SLICE_MS then
  wait = NEXT_WAITER_SLICE_MS
end
redis.call('ZADD', queue, 'NX', string.format('%d', now), secret)
local keep = wait + tonumber(ARGV[7])
redis.call('HSET', waiters, secret, cjson.encode({
  t = ttl, d = now_ms + keep, w = now_ms + wait, o = ARGV[3], l = ARGV[4], c = ARGV[6]}))
if redis.call('PTTL', queue) < keep then
  redis.call('PEXPIRE', queue, keep)
  redis.call('PEXPIRE', waiters, keep)
end
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
    _STATS
    + """
local held = redis.call('HMGET', KEYS[1], 's', 'r', 'a')
if held[1] ~= ARGV[1] then
  if held[2] == ARGV[1] then return 3 end
  if ARGV[3] == '1' then pcall(count_gone, KEYS[4], KEYS[1], ARGV[1]) end
  return 0
end
local t = redis.call('TIME')
record_release(held[3], tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('HSET', KEYS[1], 'r', ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 0 then  -- nobody waits: tombstone() inline
  redis.call('HDEL', KEYS[1], 's', 'o', 'l', 'a')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
"""
    + _PRELUDE
    + _QUEUE_PRELUDE
    + """
return free(KEYS[1], KEYS[2], KEYS[3], now_us(), ARGV[2])
"""
)

# KEYS: lock, queue, waiters
# ARGV: tombstone ms, fencing token of the hold to release ('': whichever holds it)
# Returns what was released: {token, owner, label, acquired-at, 1 or 2 as RELEASE}; or an
# empty array when nobody holds the lock, or another hold than the token's does. Tokens are
# compared as numbers: a token written by someone else as '0005' is the hold listed as 5.
FORCE_RELEASE = (
    _PRELUDE
    + _QUEUE_PRELUDE
    + """
local held = redis.call('HMGET', KEYS[1], 's', 't', 'o', 'l', 'a')
if not held[1] then return {} end
if ARGV[2] ~= '' then
  local token = tonumber(held[2] or '')
  if not token or token ~= tonumber(ARGV[2]) then return {} end
end
local how = free(KEYS[1], KEYS[2], KEYS[3], now_us(), ARGV[1])
redis.call('HSET', KEYS[1], 'f', held[1])  -- its holder learns it from an operator, not a loss
return {held[2], held[3], held[4], held[5], how}
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
    + _QUEUE_PRELUDE
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
# ARGV: secret, ms, mode ('add': ms more; 'replace': exactly ms; 'atleast': at least ms;
#       'check': change nothing), record ('1': count a hold found gone as lost, or as forced
#       when an operator released it; except 'check')
# Returns the lease left in ms (1 for 'check'), or 0 when the secret does not hold the lock.
EXTEND = (
    """
local held = redis.call('HMGET', KEYS[1], 's', 'f')
if held[1] ~= ARGV[1] then
  if ARGV[4] == '1' and ARGV[3] ~= 'check' and KEYS[2] then
    pcall(function()  -- gone: forced by an operator ('f'), else lost ('l')
"""
    + _counted("KEYS[2]", "held[2] == ARGV[1] and 'f' or 'l'", "      ")
    + """
    end)
  end
  return 0
end
if ARGV[3] == 'check' then return 1 end
local ms, mode = tonumber(ARGV[2]), ARGV[3]
local left = redis.call('PTTL', KEYS[1])
if mode == 'add' then
  ms = ms + math.max(left, 0)
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
  out[at + 6] = redis.call('PTTL', key)
end
return cjson.encode(out)
"""


# -- quorum mode (see ``quorum.py``): the same keys on each of several independent primaries.
# A quorum lock never queues on a primary: a waiter notes its process channel in ``waiters``
# (secret -> channel) and is told of the release (``secret:0``), then tries again.

# Wakes the watchers of a lock once it is free (KEYS[3]: the watchers hash).
_WAKE_WATCHERS = """
local function wake(watchers)
  if redis.call('EXISTS', watchers) == 0 then return end
  local all = redis.call('HGETALL', watchers)
  for i = 1, #all, 2 do redis.call('PUBLISH', all[i + 1], all[i] .. ':0') end
  redis.call('DEL', watchers)
end
"""

#: How far a proposed fencing token may run ahead of a primary's clock (microseconds).
QUORUM_MAX_LEAD_US = 1_000_000

# KEYS: lock, queue (unused), watchers, stats
# ARGV: secret (of this attempt: "<acquire's secret>.<n>"), ttl ms, owner, label, watch ms (0: no
#       watcher entry, and drop it), channel, proposed token, the acquire's secret (the watcher),
#       count busy ('1': count a busy answer in the statistics)
# Returns the fencing token when granted (max(last + 1, server clock in us, the proposal, which
# may lead the clock by at most QUORUM_MAX_LEAD_US): callers propose one token so that a
# majority's grants agree), else {ms left of the holder's lease, 0, ms the holder has held it}.
QUORUM_ACQUIRE = f"""
local lock, watchers, secret = KEYS[1], KEYS[3], ARGV[1]
local held = redis.call('HMGET', lock, 's', 't')
if held[1] == secret then  -- granted to this secret before (a retried attempt)
  if redis.call('PTTL', lock) < tonumber(ARGV[2]) then redis.call('PEXPIRE', lock, ARGV[2]) end
  return tonumber(held[2])
end
if not held[1] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(held[2] or '') or 0  -- a token someone else wrote may be any text
  if last >= 9e15 then last = 0 end
  local proposed = math.min(tonumber(ARGV[7]) or 0, now + {QUORUM_MAX_LEAD_US})
  local token = math.max(last + 1, now, proposed)
  redis.call('HSET', lock, 's', secret, 't', string.format('%d', token), 'o', ARGV[3],
             'l', ARGV[4], 'a', string.format('%d', now))
  redis.call('PEXPIRE', lock, ARGV[2])
  if ARGV[6] ~= '' then redis.call('HDEL', watchers, ARGV[8]) end
  return token
end
local left = redis.call('PTTL', lock)
if ARGV[9] == '1' then
  pcall(function()
{_counted("KEYS[4]", "'b'", "    ")}
  end)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local started = tonumber(redis.call('HGET', lock, 'a') or '')
local elapsed = started and math.floor(math.max(now - started, 0) / 1000) or -1
local watch = tonumber(ARGV[5])
if watch > 0 then
  redis.call('HSET', watchers, ARGV[8], ARGV[6])
  local keep = math.max(left, 0) + watch
  if redis.call('PTTL', watchers) < keep then redis.call('PEXPIRE', watchers, keep) end
elseif ARGV[6] ~= '' then
  redis.call('HDEL', watchers, ARGV[8])
end
return {{left, 0, elapsed}}
"""

# KEYS: lock
# ARGV: secret, token
# Raises the fencing token of this secret's hold to ``token`` (never lowers it). Returns 1 when
# the hold has that token now, 0 when the secret does not hold the lock.
QUORUM_RAISE = """
local held = redis.call('HMGET', KEYS[1], 's', 't')
if held[1] ~= ARGV[1] then return 0 end
if (tonumber(held[2] or '') or 0) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 't', ARGV[2])
end
return 1
"""

# KEYS: lock, queue (unused), watchers, stats
# ARGV: secret, tombstone ms, record, the acquire's wait ms, the lock's timeout ms (as RELEASE)
# As RELEASE (1 released, 3 released by this secret already, 0 not held by it: a primary that
# did not grant it, so not counted as lost here); records the hold; wakes watchers.
QUORUM_RELEASE = (
    _WAKE_WATCHERS
    + _STATS
    + """
local held = redis.call('HMGET', KEYS[1], 's', 'r', 'a')
if held[1] ~= ARGV[1] then
  if held[2] == ARGV[1] then return 3 end
  return 0
end
local t = redis.call('TIME')
record_release(held[3], tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('HSET', KEYS[1], 'r', ARGV[1])
redis.call('HDEL', KEYS[1], 's', 'o', 'l', 'a')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
wake(KEYS[3])
return 1
"""
)

# KEYS: lock, queue (unused), watchers
# ARGV: secret, tombstone ms
# As LEAVE: frees the lock if this secret holds it, or an attempt of the acquire whose secret
# it is ("<secret>.<n>") does (1, no ``r``: its holder never knew), else drops the secret's
# watcher entry (0).
QUORUM_LEAVE = (
    _WAKE_WATCHERS
    + """
local holder = redis.call('HGET', KEYS[1], 's')
if holder and (holder == ARGV[1] or string.sub(holder, 1, #ARGV[1] + 1) == ARGV[1] .. '.') then
  redis.call('HDEL', KEYS[1], 's', 'o', 'l', 'a')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  wake(KEYS[3])
  return 1
end
redis.call('HDEL', KEYS[3], ARGV[1])
return 0
"""
)

# KEYS: lock, queue (unused), watchers
# ARGV: tombstone ms, secret of the hold to release ('': whichever holds it)
# Returns what was released, {token, owner, label, acquired-at, 1}, or an empty array.
QUORUM_FORCE = (
    _WAKE_WATCHERS
    + """
local held = redis.call('HMGET', KEYS[1], 's', 't', 'o', 'l', 'a')
if not held[1] or (ARGV[2] ~= '' and held[1] ~= ARGV[2]) then return {} end
redis.call('HDEL', KEYS[1], 's', 'o', 'l', 'a')
redis.call('HSET', KEYS[1], 'f', held[1])  -- as FORCE_RELEASE: its holder's loss is forced
redis.call('PEXPIRE', KEYS[1], ARGV[1])
wake(KEYS[3])
return {held[2], held[3], held[4], held[5], 1}
"""
)


# KEYS: stats, lock
# ARGV: secret
# Counts a quorum's hold of ``secret`` that its holder found gone, which no one primary can
# tell: forced ('f') where an operator released it, else lost ('l').
STATS_COUNT = (
    _STATS
    + """
pcall(count_gone, KEYS[1], KEYS[2], ARGV[1])
return 1
"""
)

# KEYS: stats
# Returns the statistics hash of a lock as a flat array of fields and values (empty: none).
STATS_READ = """
local ok, found = pcall(redis.call, 'HGETALL', KEYS[1])
if ok then return found end
return {}
"""

# KEYS: stats keys (any number; for listing)
# Returns one JSON array with a flat array of fields and values per key (an empty one, which
# cjson writes as {}, for none or not a hash): one string to parse beats a reply per key.
STATS_READ_MANY = """
local out = {}
for i, key in ipairs(KEYS) do
  local ok, found = pcall(redis.call, 'HGETALL', key)
  out[i] = ok and found or {}
end
return cjson.encode(out)
"""


def decode_read(raw: bytes | str) -> list[Any]:
    """READ's reply as a list, six values per key (bytes that are not UTF-8 replaced)."""
    values: list[Any] = json.loads(
        raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    )
    return values


#: The scripts by name, with the hand-over lease still to be built in (see with_lease).
SOURCES = {
    "acquire": ACQUIRE,
    "release": RELEASE,
    "leave": LEAVE,
    "force_release": FORCE_RELEASE,
    "extend": EXTEND,
    "read": READ,
    "quorum_acquire": QUORUM_ACQUIRE,
    "quorum_raise": QUORUM_RAISE,
    "quorum_release": QUORUM_RELEASE,
    "quorum_leave": QUORUM_LEAVE,
    "quorum_force": QUORUM_FORCE,
    "stats_count": STATS_COUNT,
    "stats_read": STATS_READ,
    "stats_read_many": STATS_READ_MANY,
}


def with_lease(source: str, handover_lease_ms: int) -> str:
    """``source`` with the hand-over lease (and the waiters' slice derived from it) built in."""
    slice_ms = max(1, int(handover_lease_ms * _NEXT_WAITER_SLICE))
    return source.replace(_LEASE_MARK, str(handover_lease_ms)).replace(_SLICE_MARK, str(slice_ms))
