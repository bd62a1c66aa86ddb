"""The scripts of a multi-name lock on one server (``lock_many``): every name or none in one
round trip, and all released together, each handed to its own next waiter.

Each name keeps its own keys and its own hold, exactly as a lock's (``queue.py``): a name
taken here is released, listed, force-released and waited for as any lock. Only one server
runs these (a cluster keeps each name's keys in a slot of its own).
"""

from __future__ import annotations

from django_redis_lock.scripts.queue import PRELUDE_LUA, QUEUE_PRELUDE_LUA
from django_redis_lock.validation import MAX_TIMEOUT

# KEYS: lock, queue of each name in turn (2 per name)
# ARGV: ttl ms, owner, then secret and label of each name in turn
# Returns {1, token of each name} when every name was free for this caller and is now held by
# it (a name counts as free as ACQUIRE's fast path sees it: nobody holds it and nobody waits for
# it, so a name's queued waiters keep their turn); else {0, the index of the first busy name
# (1-based), ms left of its holder's lease (-1: none, waiters go first), ms its holder has
# held it (-1: unknown)}, and nothing was taken.
MANY_ACQUIRE = """
local n = #KEYS / 2
local last = {}
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  local held = redis.call('HMGET', lock, 's', 't', 'a')
  if held[1] or not (held[2] or redis.call('EXISTS', KEYS[2 * i]) == 0) then
    local started = tonumber(held[3] or held[2] or '')
    local elapsed = -1
    if held[1] and started then
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
      elapsed = math.floor(math.max(now - started, 0) / 1000)
    end
    return {0, i, held[1] and redis.call('PTTL', lock) or -1, elapsed}
  end
  last[i] = tonumber(held[2] or '') or 0  -- as in grant(): any text, or absurdly large
  if not (last[i] >= 0 and last[i] < 9e15) then last[i] = 0 end  -- NaN too
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {1}
for i = 1, n do
  local lock = KEYS[2 * i - 1]
  local token = math.max(last[i] + 1, now)
  redis.call('HSET', lock, 's', ARGV[2 * i + 1], 't', string.format('%d', token), 'o', ARGV[2],
             'l', ARGV[2 * i + 2])
  if token ~= now then redis.call('HSET', lock, 'a', string.format('%d', now)) end
  redis.call('PEXPIRE', lock, ARGV[1])
  out[i + 1] = token
end
return out
"""

# KEYS: lock, queue, waiters of each name in turn (3 per name)
# ARGV: tombstone ms, then the secret of each name in turn
# Returns for each name what RELEASE returns for it: 1 released, 2 released and handed to its
# next waiter (woken as RELEASE wakes it), 3 released by this secret already, 0 not held by it.
MANY_RELEASE = (
    """
local out, queued = {}, false
for i = 1, #KEYS / 3 do
  local lock, secret = KEYS[3 * i - 2], ARGV[i + 1]
  local held = redis.call('HMGET', lock, 's', 'r')
  if held[1] ~= secret then
    out[i] = held[2] == secret and 3 or 0
  elseif redis.call('EXISTS', KEYS[3 * i - 1]) == 0 then  -- nobody waits: tombstone() inline
    redis.call('HSET', lock, 'r', secret)
    redis.call('HDEL', lock, 's', 'o', 'l', 'a')
    redis.call('PEXPIRE', lock, ARGV[1])
    out[i] = 1
  else
    queued = true
  end
end
-- The helpers are defined only when a name has waiters: a definition costs time per call.
if not queued then return out end
"""
    + PRELUDE_LUA
    + QUEUE_PRELUDE_LUA
    + """
local now = now_us()
for i = 1, #KEYS / 3 do
  if not out[i] then
    local lock, queue, waiters = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
    local secret = ARGV[i + 1]
    local last = redis.call('HGET', lock, 't')
    if hand_over(lock, queue, waiters, now, last, secret) then
      out[i] = 2
    else
      redis.call('HSET', lock, 'r', secret)
      tombstone(lock, ARGV[1])
      out[i] = 1
    end
  end
end
return out
"""
)

# KEYS: lock of each name
# ARGV: ms, mode ('add', 'replace', 'atleast' as EXTEND), then the secret of each name in turn
# Returns the shortest lease left in ms, or 0 when a name is not held by its secret (then no
# name's lease was changed: the set is lost as a whole).
MANY_EXTEND = (
    f"local MAX_TIMEOUT_MS = {MAX_TIMEOUT * 1000}\n"
    + """
for i, lock in ipairs(KEYS) do
  if redis.call('HGET', lock, 's') ~= ARGV[i + 2] then return 0 end
end
local shortest = nil
for _, lock in ipairs(KEYS) do
  local ms, left = tonumber(ARGV[1]), redis.call('PTTL', lock)
  if ARGV[2] == 'add' then
    ms = math.min(ms + math.max(left, 0), MAX_TIMEOUT_MS)
  elseif ARGV[2] == 'atleast' and left >= ms then
    ms = left
  end
  if ms ~= left then redis.call('PEXPIRE', lock, ms) end
  if not shortest or ms < shortest then shortest = ms end
end
return shortest
"""
)
