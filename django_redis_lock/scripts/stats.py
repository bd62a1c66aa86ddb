"""The Lua that records a lock's hold and wait statistics, and reads them (see ``stats.py``
for what they say). Recording runs inside the release and acquire scripts, through pcall: a
statistics key someone else broke never fails a lock."""

from __future__ import annotations

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
#: The field of a statistics hash that counts the callers of ``cache_once`` served the value
#: another computed (stampedes avoided): their hold's release adds one (``SharedLock.tally``).
AVOIDED = "ca"


def counted_lua(stats: str, field: str, indent: str) -> str:
    """Lua that counts one more of ``field`` in the statistics hash ``stats`` (both Lua
    expressions) and keeps the hash for as long as its holds recorded say (see above)."""
    lines = (
        f"redis.call('HINCRBY', {stats}, {field}, 1)",
        f"local recorded = tonumber(redis.call('HGET', {stats}, 'n') or '') or 0",
        f"redis.call('PEXPIRE', {stats}, recorded > 1 and {STATS_TTL_MS} or {FIRST_STATS_TTL_MS})",
    )
    return "\n".join(indent + line for line in lines)


# The bucket in Lua, without a table of the bounds (built at every call of a script): the
# bounds below an hour are 1, 2, 3, 5 and 7 times a power of ten, five to a decade, so the
# bucket of a value is five per decade below its own and its leading digits' place in it.
_LAST_BUCKET = len(BOUNDS_MS)
_HOUR_MS = BOUNDS_MS[-1]

# Recording into a lock's statistics hash (KEYS[4] of the scripts that record): ``n``
# acquisitions recorded at their release, ``b`` busy answers (an acquire's first), ``l`` lost
# holds (found gone by their holder), ``f`` forced holds (found gone by their holder after an
# operator released them: not a sign of a short timeout), ``m`` the longest hold (ms), ``t``
# the lock's timeout (ms, as last released), ``h<i>``/``w<i>`` the hold and wait histograms'
# buckets. Run through pcall: a statistics key someone else broke never fails a release.
STATS_LUA = (
    f"local STATS_TTL_MS, FIRST_STATS_TTL_MS = {STATS_TTL_MS}, {FIRST_STATS_TTL_MS}\n"
    + f"local LAST_BUCKET, HOUR_MS = {_LAST_BUCKET}, {_HOUR_MS}\n"
    + """
-- The histogram bucket of a value (ms): how many bounds are at or below it.
local function bucket(ms)
  if not (ms >= 1) then return 0 end  -- nan too: a start time someone else wrote
  if ms >= HOUR_MS then return LAST_BUCKET end
  local decade = #string.format('%d', ms) - 1  -- digits before the point, less one
  local lead = ms / 10 ^ decade  -- from 1 to under 10
  local step = lead < 2 and 1 or lead < 3 and 2 or lead < 5 and 3 or lead < 7 and 4 or 5
  return decade * 5 + step
end

-- A number read back as this library writes it (a whole number from 0 up to Lua's exact
-- integers); anything else someone else wrote (text, inf, nan, below zero) counts as 0.
local function whole(value)
  local number = tonumber(value or '') or 0
  if not (number >= 0 and number < 9e15) then return 0 end
  return math.floor(number)
end

local function count(stats, field)
"""
    + counted_lua("stats", "field", "  ")
    + """
end

-- A hold its holder found gone: ``f`` (forced) when an operator released it, else ``l`` (lost).
local function count_gone(stats, lock, secret)
  count(stats, redis.call('HGET', lock, 'f') == secret and 'f' or 'l')
end

-- A hold that lasted hold_ms, after an acquire that waited wait_ms, of a lock whose timeout
-- is ttl_ms, released at ``now`` (server clock, microseconds). Waits under a millisecond
-- (bucket 0, most of them) are not written: they are the holds recorded less the other waits.
-- The hash's lifetime is set at its first and second recorded hold, then at most once an hour
-- (``e``: the hour of the last, by the server's clock), not at every release: one command less.
-- It reads the hash once and writes it once (the script runs alone: nothing changes between
-- the two), fewer commands than an HINCRBY per counter.
local function record(stats, hold_ms, wait_ms, ttl_ms, now)
  local hold, waited = 'h' .. bucket(hold_ms), wait_ms >= 1 and 'w' .. bucket(wait_ms)
  local seen
  if waited then
    seen = redis.call('HMGET', stats, 'n', 'm', 't', 'e', hold, waited)
  else
    seen = redis.call('HMGET', stats, 'n', 'm', 't', 'e', hold)
  end
  local recorded = whole(seen[1]) + 1
  local out = {'n', string.format('%d', recorded), hold, string.format('%d', whole(seen[5]) + 1)}
  if waited then out[5], out[6] = waited, string.format('%d', whole(seen[6]) + 1) end
  local longest = whole(seen[2])
  local hour = string.format('%d', math.floor(now / 3600000000))
  local renew = recorded <= 2 or seen[4] ~= hour
  if renew or hold_ms > longest or tonumber(seen[3] or '') ~= ttl_ms then
    local at = #out
    out[at + 1], out[at + 2] = 'm', string.format('%d', math.max(hold_ms, longest))
    out[at + 3], out[at + 4], out[at + 5], out[at + 6] = 't', ttl_ms, 'e', hour
  end
  redis.call('HSET', stats, unpack(out))
  if renew then
    redis.call('PEXPIRE', stats, recorded > 1 and STATS_TTL_MS or FIRST_STATS_TTL_MS)
  end
end

-- After a release by its holder: record the hold (from its start, ``a``), if asked to
-- (ARGV[3] '1'; ARGV[4] the acquire's wait ms, ARGV[5] the lock's timeout ms).
local function record_release(lock_start, now)
  local started = tonumber(lock_start or '')
  if ARGV[3] ~= '1' or not started then return end
  pcall(record, KEYS[4], math.max(now - started, 0) / 1000, tonumber(ARGV[4]) or 0,
        tonumber(ARGV[5]) or 0, now)
end
"""
)


# KEYS: stats, lock
# ARGV: secret
# Counts a quorum's hold of ``secret`` that its holder found gone, which no one primary can
# tell: forced ('f') where an operator released it, else lost ('l').
STATS_COUNT = (
    STATS_LUA
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
