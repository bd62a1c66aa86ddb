"""The scripts of a rate limit: a generic cell rate algorithm (GCRA) on the server's clock.

A rate limit keeps one small hash, ``g`` in the key layout (``backends.base``): ``t`` the
theoretical arrival time of the next call (server clock, microseconds, with a fraction: an
interval need not be whole), ``r`` the rate as last asked (text, for listings), ``b`` its burst
and ``i`` its interval (microseconds). Its PTTL is the time until it has drained: an idle rate
limit has no key. The statistics hash of the name (``s``) counts ``ra`` calls admitted and
``rl`` calls limited.

A call conforms at the time ``t - burst * interval``: it is admitted when that time has come,
and ``t`` moves on by one interval. A blocking call whose turn is later, but within how long it
may wait, takes its turn at once (``t`` moves on) and is told how long to sleep until then: the
turns are handed out in the order calls reach the server, and nobody looks again.
"""

from __future__ import annotations

from django_redis_lock.scripts.stats import STATS_TTL_MS

# KEYS: the rate limit's hash, the name's statistics hash.
# ARGV: the interval (microseconds, may have a fraction), the burst (calls above the rate at
# once), how long the call may wait for its turn (microseconds; -1: as long as it takes, 0: not
# at all), the rate as text, whether to count into the statistics ("1"/"0").
# Reply: admitted, the text "<wait>:<now>:<next>" (microseconds: how long until its turn, the
# server's clock, the next call's theoretical arrival time); limited, an array of three such
# texts {<retry after>, <now>, <next>}. Only an admission writes anything a replica must have.
RATE_ACQUIRE = f"""
local STATS_TTL_MS = {STATS_TTL_MS}
local key, stats = KEYS[1], KEYS[2]
local interval, burst, patience = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
-- Another program's value at the key (another type, text, nan, a time beyond any): the rate
-- limit starts afresh rather than failing every call or refusing them for ever.
local read, raw = pcall(redis.call, 'HGET', key, 't')
if not read then
  redis.call('DEL', key)
  raw = nil
end
local tat = tonumber(raw or '')
if not (tat and tat >= 0 and tat < 9e15) then tat = now end
if tat < now then tat = now end
local wait = tat - burst * interval - now
if wait < 0 then wait = 0 end
local counted = ARGV[5] == '1'
if wait > 0 and (patience == 0 or (patience > 0 and wait > patience)) then
  if counted then
    pcall(redis.call, 'HINCRBY', stats, 'rl', 1)
    redis.call('PEXPIRE', stats, STATS_TTL_MS)
  end
  return {{string.format('%.0f', math.ceil(wait)), string.format('%.0f', now),
          string.format('%.3f', tat)}}
end
local after = tat + interval
redis.call('HSET', key, 't', string.format('%.3f', after), 'r', ARGV[4], 'b', ARGV[2],
           'i', ARGV[1])
redis.call('PEXPIRE', key, math.ceil((after - now) / 1000) + 1)
if counted then
  pcall(redis.call, 'HINCRBY', stats, 'ra', 1)
  redis.call('PEXPIRE', stats, STATS_TTL_MS)
end
return string.format('%.0f:%.0f:%.3f', math.ceil(wait), now, after)
"""

# KEYS: rate limits' hashes, any number (of one slot on a cluster).
# Reply: JSON, per key [next, rate, burst, interval, now] as stored (null: no such rate limit;
# the stored values are text someone else may have written: the reader checks them).
RATE_READ_MANY = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local found = {}
for i, key in ipairs(KEYS) do
  local read, values = pcall(redis.call, 'HMGET', key, 't', 'r', 'b', 'i')
  if read and values[1] then
    found[i] = {values[1], values[2] or false, values[3] or false, values[4] or false,
                string.format('%.0f', now)}
  else
    found[i] = false
  end
end
return cjson.encode(found)
"""
