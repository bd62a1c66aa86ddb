"""The scripts of a lock with several holders at once: a semaphore (at most ``limit`` holders)
and a read/write lock (any number of readers, or one writer), on one server (or a Sentinel or
cluster primary).

Their keys mirror a lock's (holders, queue, waiters, statistics; one hash tag) and their
arguments and replies are a lock's too, so that the lock core, its waiting and its watchdog
run them as they run a lock's: only ``acquire`` takes two more arguments, the kind of the hold
and the semaphore's limit.

The holders hash has a field per holder, its secret, holding JSON: ``e`` when its lease ends
(ms, server clock), ``t`` its fencing token, ``a`` when it was granted (us), ``o`` owner,
``l`` label, ``k`` kind (``s`` a semaphore's permit, ``r`` a reader, ``w`` the writer). Every
script first drops the holders whose lease ended (a crashed holder's permit comes back then),
and anything else that is not a holder's JSON. Other fields: ``#t`` the last fencing token
(the tokens of a name only go up), ``#n`` the limit the last acquire asked for, ``#r`` the
secrets released last, joined by commas (a release retried after its reply was lost succeeds
quietly), ``f``
the last holder an operator released. The key lives as long as its longest lease, then as
long as the tombstone timeout.
"""

from __future__ import annotations

from django_redis_lock.scripts.queue import CLOCK_LUA, QUEUE_PRELUDE_LUA
from django_redis_lock.scripts.stats import STATS_LUA
from django_redis_lock.validation import MAX_TIMEOUT

# How many released secrets the holders hash remembers (see ``#r``).
_REMEMBERED = 16

_SHARED_PRELUDE = (
    f"local MAX_TIMEOUT_MS = {MAX_TIMEOUT * 1000}\n"
    + CLOCK_LUA
    + STATS_LUA
    + QUEUE_PRELUDE_LUA
    + """
-- Whether a decoded field is a live holder as these scripts write one, and as a listing can
-- show it: a lease in whole ms that has not ended and is at most MAX_TIMEOUT long, a token of
-- digits the scripts compare exactly, a start time of digits a datetime can hold, a kind.
local function digits(text, below)
  return type(text) == 'string' and string.match(text, '^%d+$') ~= nil and #text < 19
    and tonumber(text) < below
end

local function ours(entry, now_ms)
  return type(entry) == 'table' and type(entry.e) == 'number' and entry.e > now_ms
    and entry.e == math.floor(entry.e) and entry.e <= now_ms + MAX_TIMEOUT_MS
    and (entry.k == 's' or entry.k == 'r' or entry.k == 'w')
    and digits(entry.t, 9e15) and digits(entry.a, 2.5e17)
end

-- The live holders (secret -> entry), how many, whether the writer is one, and when the first
-- lease ends (ms); drops the holders whose lease ended, and any field that is no holder.
local function holders(key, now_ms)
  local ok, all = pcall(redis.call, 'HGETALL', key)
  local live, n, writer, soonest = {}, 0, false, nil
  if not ok then return live, n, writer, soonest end
  for i = 1, #all, 2 do
    local field = all[i]
    if field ~= 'f' and string.sub(field, 1, 1) ~= '#' then
      local decoded, entry = pcall(cjson.decode, all[i + 1])
      if decoded and ours(entry, now_ms) then
        live[field] = entry
        n = n + 1
        if entry.k == 'w' then writer = true end
        if not soonest or entry.e < soonest then soonest = entry.e end
      else
        redis.call('HDEL', key, field)
      end
    end
  end
  return live, n, writer, soonest
end

local function fits(kind, n, writer, limit)
  if kind == 'w' then return n == 0 end
  if kind == 'r' then return not writer end
  return n < limit
end

local function limit_of(key)
  return tonumber(redis.call('HGET', key, '#n') or '') or 1
end

-- The key lives at least until ``until_ms``.
local function keep(key, until_ms, now_ms)
  local left = until_ms - now_ms
  if redis.call('PTTL', key) < left then redis.call('PEXPIRE', key, left) end
end

local function grant(key, secret, ttl, owner, label, kind, now)
  local last = tonumber(redis.call('HGET', key, '#t') or '') or 0
  if not (last >= 0 and last < 9e15) then last = 0 end  -- NaN too
  local token = math.max(last + 1, now)
  local now_ms = math.floor(now / 1000)
  redis.call('HSET', key, '#t', string.format('%d', token), secret, cjson.encode({
    e = now_ms + ttl, t = string.format('%d', token), a = string.format('%d', now),
    o = owner, l = label, k = kind}))
  keep(key, now_ms + ttl, now_ms)
  return token
end

-- Hand free places to the first live waiters, in order, while they fit; tell each its
-- process; then tell the first still waiting when the first lease ends. How many got one.
local function serve(key, queue, waiters, now)
  local now_ms = math.floor(now / 1000)
  local live, n, writer, soonest = holders(key, now_ms)
  local limit, served = limit_of(key), 0
  while true do
    local secret, entry = first_live(queue, waiters, now_ms)
    if not secret then break end
    local kind = entry.k or 's'
    -- Each waiter is let in under its own limit (``n``), not the last caller's.
    if not fits(kind, n, writer, tonumber(entry.n) or limit) then
      nudge_first(queue, waiters, now_ms, soonest and (soonest - now_ms) or 0)
      break
    end
    redis.call('ZREM', queue, secret)
    redis.call('HDEL', waiters, secret)
    local lease = math.min(entry.t, HANDOVER_LEASE_MS)
    local token = grant(key, secret, lease, entry.o, entry.l, kind, now)
    wake(entry.c, secret .. ':' .. string.format('%d', token) .. ':' .. string.format('%d', now))
    n, served = n + 1, served + 1
    if kind == 'w' then writer = true end
    if not soonest or now_ms + lease < soonest then soonest = now_ms + lease end
  end
  return served
end

-- After a holder left: the freed places to the waiters (2 when one got one, else 1); a key
-- without holders keeps only its last token, for the tombstone timeout.
local function freed(key, queue, waiters, now, tombstone_ms)
  if serve(key, queue, waiters, now) > 0 then return 2 end
  local _, n = holders(key, math.floor(now / 1000))
  if n == 0 then redis.call('PEXPIRE', key, tombstone_ms) end
  return 1
end
"""
)

# KEYS: holders, queue, waiters, stats
# ARGV: as a lock's ACQUIRE (secret, ttl ms, owner, label, wait ms, channel, grace ms, count
#       busy), then the kind ('s', 'r' or 'w') and the limit (a semaphore's)
# Returns as ACQUIRE: the fencing token, or {ms until the first holder's lease ends, ms to wait,
# ms the longest holder has held it}. A waiter is served in arrival order: one that fits
# waits behind an earlier one that does not (a reader behind a waiting writer).
SHARED_ACQUIRE = (
    _SHARED_PRELUDE
    + """
local key, queue, waiters, secret = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local ttl, kind = tonumber(ARGV[2]), ARGV[9]
local now = now_us()
local now_ms = math.floor(now / 1000)
if kind == 's' then redis.call('HSET', key, '#n', ARGV[10]) end
local live, n, writer, soonest = holders(key, now_ms)
local mine = live[secret]
if mine then  -- granted to this secret already (a hand-over): the lease at least ttl
  if mine.e < now_ms + ttl then
    mine.e = now_ms + ttl
    redis.call('HSET', key, secret, cjson.encode(mine))
    keep(key, mine.e, now_ms)
  end
  return tonumber(mine.t)
end
local head = first_live(queue, waiters, now_ms)
if fits(kind, n, writer, tonumber(ARGV[10]) or 1) and (not head or head == secret) then
  if head then
    redis.call('ZREM', queue, secret)
    redis.call('HDEL', waiters, secret)
  end
  local token = grant(key, secret, ttl, ARGV[3], ARGV[4], kind, now)
  if head then serve(key, queue, waiters, now) end  -- readers right behind it may go too
  return token
end
if ARGV[8] == '1' then pcall(count, KEYS[4], 'b') end
local left = soonest and (soonest - now_ms) or -1
local elapsed = -1
for _, entry in pairs(live) do
  local started = tonumber(entry.a or '')
  if started then elapsed = math.max(elapsed, math.floor(math.max(now - started, 0) / 1000)) end
end
local wait = tonumber(ARGV[5])
if wait == 0 then
  if redis.call('ZREM', queue, secret) == 1 then
    redis.call('HDEL', waiters, secret)
    serve(key, queue, waiters, now)  -- it may have held up the ones behind it
  end
  return {left, 0, elapsed}
end
local entry = {t = ttl, o = ARGV[3], l = ARGV[4], c = ARGV[6], k = kind, n = tonumber(ARGV[10])}
wait = enqueue(queue, waiters, secret, entry, head, left, wait, tonumber(ARGV[7]), now)
return {left, wait, elapsed}
"""
)

# KEYS: holders, queue, waiters, stats
# ARGV: as RELEASE (secret, tombstone ms, record, the acquire's wait ms, the timeout ms), then
#       optionally a counter of the statistics to add one to (when recording): see
#       ``SharedLock.tally``
# Returns as RELEASE: 1 released, 2 released and a waiter served, 3 released by this secret
# already, 0 not held by it (counted as lost, or as forced).
SHARED_RELEASE = (
    _SHARED_PRELUDE
    + f"local REMEMBERED = {_REMEMBERED}\n"
    + """
local key, secret = KEYS[1], ARGV[1]
local now = now_us()
local live, n = holders(key, math.floor(now / 1000))
local mine = live[secret]
local released = redis.call('HGET', key, '#r') or ''
if not mine then
  if string.find(',' .. released .. ',', ',' .. secret .. ',', 1, true) then return 3 end
  if ARGV[3] == '1' then pcall(count_gone, KEYS[4], key, secret) end
  freed(key, KEYS[2], KEYS[3], now, ARGV[2])  -- an ended lease freed a place: serve it
  return 0
end
record_release(mine.a, now)
if ARGV[3] == '1' and ARGV[6] then pcall(count, KEYS[4], ARGV[6]) end
released = secret .. ',' .. released
if #released > REMEMBERED * 40 then released = string.sub(released, 1, REMEMBERED * 40) end
redis.call('HDEL', key, secret)
redis.call('HSET', key, '#r', released)
if redis.call('EXISTS', KEYS[2]) == 0 then  -- nobody waits: no one to serve
  if n == 1 then redis.call('PEXPIRE', key, ARGV[2]) end
  return 1
end
return freed(key, KEYS[2], KEYS[3], now, ARGV[2])
"""
)

# KEYS: holders, queue, waiters
# ARGV: as LEAVE (secret, tombstone ms): frees what the attempt got (1 or 2), else takes it
# out of the queue (0).
SHARED_LEAVE = (
    _SHARED_PRELUDE
    + """
local key, secret = KEYS[1], ARGV[1]
local now = now_us()
local live = holders(key, math.floor(now / 1000))
if live[secret] then
  redis.call('HDEL', key, secret)
  return freed(key, KEYS[2], KEYS[3], now, ARGV[2])
end
if redis.call('ZREM', KEYS[2], secret) == 1 then
  redis.call('HDEL', KEYS[3], secret)
  serve(key, KEYS[2], KEYS[3], now)
end
return 0
"""
)

# KEYS: holders, stats (optional)
# ARGV: as EXTEND (secret, ms, mode, record, and optionally an owner and a label)
# Returns as EXTEND: the holder's lease left in ms (1 for 'check'), or 0 when it holds none.
SHARED_EXTEND = (
    f"local MAX_TIMEOUT_MS = {MAX_TIMEOUT * 1000}\n"
    + STATS_LUA
    + """
local key, secret = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.pcall('HGET', key, secret)
local decoded, entry = false, nil
if type(raw) == 'string' then decoded, entry = pcall(cjson.decode, raw) end
if not decoded or type(entry) ~= 'table' or type(entry.e) ~= 'number' or entry.e <= now_ms then
  if ARGV[4] == '1' and ARGV[3] ~= 'check' and KEYS[2] then
    pcall(count_gone, KEYS[2], key, secret)
  end
  return 0
end
if ARGV[5] then entry.o, entry.l = ARGV[5], ARGV[6] end
if ARGV[3] == 'check' then
  if ARGV[5] then redis.call('HSET', key, secret, cjson.encode(entry)) end
  return 1
end
local ms, left = tonumber(ARGV[2]), entry.e - now_ms
if ARGV[3] == 'add' then
  -- Capped: a lease past MAX_TIMEOUT would read as no holder's (see ours()) and lose the place.
  ms = math.min(ms + left, MAX_TIMEOUT_MS)
elseif ARGV[3] == 'atleast' and left >= ms then
  return left
end
entry.e = now_ms + ms
redis.call('HSET', key, secret, cjson.encode(entry))
if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
return ms
"""
)

# KEYS: holders
# ARGV: a secret ('' none)
# Returns one JSON array of six values as READ: that secret's hold if it has one, else the
# hold whose lease ends last (so: held by anyone), else false values; then the limit and how
# many hold it.
SHARED_READ = (
    _SHARED_PRELUDE
    + """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live, n = holders(KEYS[1], now_ms)
local pick, secret = live[ARGV[1]], ARGV[1]
if not pick then
  secret = false
  for each, entry in pairs(live) do
    if not pick or entry.e > pick.e then pick, secret = entry, each end
  end
end
local limit = limit_of(KEYS[1])
if not pick then return cjson.encode({false, false, false, false, false, -2, limit, 0}) end
return cjson.encode({secret, pick.t, pick.o, pick.l, pick.a, pick.e - now_ms, limit, n})
"""
)

# KEYS: holders keys (any number; listing)
# Returns one JSON array, per key: {limit, {token, owner, label, acquired-at, lease ms, kind}
# per live holder}; a key that is not a holders hash reads as no holders.
SHARED_READ_MANY = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i, key in ipairs(KEYS) do
  local ok, all = pcall(redis.call, 'HGETALL', key)
  local found, limit = {}, false
  if ok then
    for j = 1, #all, 2 do
      local field = all[j]
      if field == '#n' then
        limit = all[j + 1]
      elseif field ~= 'f' and string.sub(field, 1, 1) ~= '#' then
        local decoded, entry = pcall(cjson.decode, all[j + 1])
        if decoded and type(entry) == 'table' and type(entry.e) == 'number'
            and entry.e > now_ms then
          table.insert(found, {entry.t or false, entry.o or false, entry.l or false,
                               entry.a or false, entry.e - now_ms, entry.k or false})
        end
      end
    end
  end
  out[i] = {limit, found}
end
return cjson.encode(out)
"""

# KEYS: holders, queue, waiters
# ARGV: tombstone ms, fencing token of the holder to release ('': the only holder)
# Returns as FORCE_RELEASE: {token, owner, label, acquired-at, 1 or 2} of the holder
# released; an empty array when no holder has that token (or, without one, when there is not
# exactly one holder).
SHARED_FORCE = (
    _SHARED_PRELUDE
    + """
local key = KEYS[1]
local now = now_us()
local live, n = holders(key, math.floor(now / 1000))
local chosen, entry = nil, nil
for secret, each in pairs(live) do
  if ARGV[2] == '' and n == 1 then chosen, entry = secret, each end
  if ARGV[2] ~= '' and tonumber(each.t or '') == tonumber(ARGV[2]) then
    chosen, entry = secret, each
  end
end
if not chosen then return {} end
redis.call('HDEL', key, chosen)
redis.call('HSET', key, 'f', chosen)  -- its holder learns it from an operator, not a loss
local how = freed(key, KEYS[2], KEYS[3], now, ARGV[1])
return {entry.t or false, entry.o or false, entry.l or false, entry.a or false, how}
"""
)
