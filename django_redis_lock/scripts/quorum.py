"""The scripts of a quorum lock (see ``backends/quorum.py``): the same keys on each of several
independent primaries. A quorum lock never queues on a primary: a waiter notes its process
channel in ``waiters`` (secret -> channel) and is told of the release (``secret:0``), then tries
again."""

from __future__ import annotations

from django_redis_lock.scripts.stats import STATS_LUA, counted_lua

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
  if not (last >= 0 and last < 9e15) then last = 0 end  -- NaN too
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
{counted_lua("KEYS[4]", "'b'", "    ")}
  end)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local since = redis.call('HMGET', lock, 'a', 't')  -- no a: a lock's hold began at its token
local started = tonumber(since[1] or since[2] or '')
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
    + STATS_LUA
    + """
local held = redis.call('HMGET', KEYS[1], 's', 'r', 'a', 't')
if held[1] ~= ARGV[1] then
  if held[2] == ARGV[1] then return 3 end
  return 0
end
local t = redis.call('TIME')
record_release(held[3] or held[4], tonumber(t[1]) * 1000000 + tonumber(t[2]))
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
return {held[2], held[3], held[4], held[5] or held[2], 1}
"""
)
