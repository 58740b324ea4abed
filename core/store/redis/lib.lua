-- Shared by every script: prepended to each one when the scripts are loaded (Redis scripts cannot
-- include one another), after the store's settings (scripts.ts): P key prefix, CH wake channel,
-- LEASE slot lease (ms), RECORD_TTL, DONE_TTL (ms), DONE_BUCKET (keys.ts), LF the ledger entries' field of records,
-- WINDOW_MS (key window name → ms).
-- Integers only: amounts arrive as decimal strings and are written back with I(), so no float
-- ever reaches a counter (Lua numbers are doubles, exact up to 2^53).

local DAY = 86400000
local MINUTE = 60000

-- Milliseconds from the server's clock, read once per script (a batch of operations shares it);
-- tests pass a fixed time instead ('0' = use TIME).
local TNOW
local function now_ms(override)
  if override ~= nil and override ~= '0' and override ~= '' then return tonumber(override) end
  if not TNOW then
    local t = redis.call('TIME')
    TNOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return TNOW
end

local function I(n) return string.format('%d', n) end
local function num(v) return tonumber(v) or 0 end

local function day_start(t) return math.floor(t / DAY) * DAY end
-- ISO week: Monday 00:00 UTC (1970-01-01 was a Thursday).
local function week_start(t)
  local d = math.floor(t / DAY)
  return (d - (d + 3) % 7) * DAY
end

-- Proleptic Gregorian calendar from days since the epoch, and back (H. Hinnant's algorithms).
local function civil(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- Month starts by day number: every settlement needs its month's, and a call sees one or two days.
local MONTH0 = {}
local function month_start(t)
  local d = math.floor(t / DAY)
  local ms = MONTH0[d]
  if not ms then
    local y, m = civil(d)
    ms = days_from_civil(y, m, 1) * DAY
    MONTH0[d] = ms
  end
  return ms
end

local function next_month_start(t)
  local y, m = civil(math.floor(t / DAY))
  m = m + 1
  if m > 12 then m = 1; y = y + 1 end
  return days_from_civil(y, m, 1) * DAY
end

local function day_key(t)
  local y, m, d = civil(math.floor(t / DAY))
  return string.format('%04d-%02d-%02d', y, m, d)
end

local find, sub = string.find, string.sub
local function split(s, sep)
  local out = {}
  if s == nil or s == false or s == '' then return out end
  local from, n, step = 1, 0, #sep
  while true do
    local i = find(s, sep, from, true)
    n = n + 1
    if not i then
      out[n] = sub(s, from)
      return out
    end
    out[n] = sub(s, from, i - 1)
    from = i + step
  end
end

-- split() of a text that many operations of a batch repeat (a record's held counters): the parts
-- are only read, so one table serves them all.
local SPLITS = {}
local function split_cached(s, sep)
  local key = sep .. (s or '')
  local out = SPLITS[key]
  if not out then
    out = split(s, sep)
    SPLITS[key] = out
  end
  return out
end

-- Separators of packed arguments (names never contain them: keys.ts escapes them, pack.ts refuses them).
local SEP, LIST = '\31', '\30'

-- Key names, as keys.ts builds them: P .. '{' .. tag .. '}:' .. suffix.
local function key(tag, suffix) return P .. '{' .. tag .. '}:' .. suffix end

-- Hash fields read once and written once per script: every field a script will use of one hash is
-- declared first (hwant), loaded together (hload, or on first use: one HMGET per hash), changed in
-- Lua, and written back by hflush (one HSET, and one HDEL, per hash) — instead of one call per field.
-- Kept lean (positional tables, no varargs on the hot path): the scripts run on every request.
local H = {}   -- key → { f = fields declared, not loaded; v = field → value (false: absent); d = dirty fields; ds = dirty set; p = in HL }
local HK = {}  -- keys in first-use order
local HL, NHL = {}, 0 -- keys with fields declared and not loaded yet (what the next hload reads)

local function hentry(k)
  local e = H[k]
  if not e then
    e = { f = {}, v = {}, d = {}, ds = {} }
    H[k] = e
    HK[#HK + 1] = k
  end
  return e
end

-- Declares fields to load (those not known yet: in a batch, a hash read by an earlier operation is not read again).
local function hpending(e, k)
  if not e.p then
    e.p = true
    NHL = NHL + 1
    HL[NHL] = k
  end
end

local function hwant1(k, a)
  local e = H[k] or hentry(k)
  if e.v[a] == nil then
    local f = e.f
    f[#f + 1] = a
    hpending(e, k)
  end
end

local function hwant2(k, a, b)
  local e = H[k] or hentry(k)
  local v, f = e.v, e.f
  local n = #f
  if v[a] == nil then n = n + 1; f[n] = a end
  if v[b] == nil then n = n + 1; f[n] = b end
  if n > 0 then hpending(e, k) end
end

local function hwant(k, ...)
  local e = H[k] or hentry(k)
  local v, f = e.v, e.f
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if v[x] == nil then f[#f + 1] = x end
  end
  if #f > 0 then hpending(e, k) end
end

-- Loads the declared fields of one hash (one HMGET); a value already known is kept.
local function hload1(e, k)
  local f = e.f
  if #f == 0 then return end
  local r = redis.call('HMGET', k, unpack(f))
  local v = e.v
  for j = 1, #f do
    local name = f[j]
    if v[name] == nil then v[name] = r[j] end
  end
  e.f = {}
end

-- Loads the declared fields of every hash.
local function hload()
  for i = 1, NHL do
    local k = HL[i]
    local e = H[k]
    e.p = false
    hload1(e, k)
  end
  NHL = 0
end

-- The raw value (false when absent).
local function hraw(k, f)
  local e = hentry(k)
  local v = e.v[f]
  if v == nil then
    e.f[#e.f + 1] = f
    hload1(e, k)
    v = e.v[f]
  end
  return v
end

-- The value as a number (0 when absent); kept as a number, so a batch converts each field once.
local function hnum(k, f)
  local e = H[k] or hentry(k)
  local v = e.v[f]
  if type(v) == 'number' then return v end
  if v == nil then v = hraw(k, f) end
  local n = tonumber(v) or 0
  if v ~= false then e.v[f] = n end
  return n
end

-- The value as a number, nil when absent (a window start: absent and 0 differ).
local function hnum_or_nil(k, f)
  local v = hraw(k, f)
  if v == false then return nil end
  if type(v) == 'number' then return v end
  return hnum(k, f)
end

local function hput(k, f, v)
  local e = H[k] or hentry(k)
  if type(v) ~= 'number' then e.all = nil end
  e.v[f] = v
  if not e.ds[f] then
    e.ds[f] = true
    e.d[#e.d + 1] = f
  end
end

-- An expiry set once at the end of the script (hflush), after the writes, so the key exists: for a
-- hash written through the cache, or any key a batch may write many times (key → ms).
local HX, HXK = {}, {}
local function hexpire(k, ms)
  if not HX[k] then HXK[#HXK + 1] = k end
  HX[k] = ms
end

local function hadd(k, f, d)
  local e = H[k] or hentry(k)
  local v = e.v[f]
  if type(v) ~= 'number' then v = hnum(k, f) end
  e.v[f] = v + d
  if not e.ds[f] then
    e.ds[f] = true
    e.d[#e.d + 1] = f
  end
end
local function hdel(k, f) hput(k, f, false) end

-- A list "key, field, key, field, ..." (a record's held counters) as "values, field, key" triples,
-- built once per call and list: each field loaded, made a number and marked written, so an add is
-- one table update (a settlement gives back seven reservations). A field later made a non-number
-- (hdel) falls back to hadd.
local PAIRS = {}
local function hpairs(list)
  local p = PAIRS[list]
  if p then return p end
  for i = 1, #list - 1, 2 do hwant1(list[i], list[i + 1]) end
  hload()
  p = {}
  for i = 1, #list - 1, 2 do
    local k, f = list[i], list[i + 1]
    hadd(k, f, 0)
    p[#p + 1] = H[k].v
    p[#p + 1] = f
    p[#p + 1] = k
  end
  PAIRS[list] = p
  return p
end

-- hwant of a field list that hadd_all adds to (nothing to declare once a call has added it).
local function hwant_all(k, fields)
  local e = H[k] or hentry(k)
  if e.all == fields then return end
  for i = 1, #fields do hwant1(k, fields[i]) end
end

-- hadd of values[1..#fields] to fields: the fields are made numbers and marked written the first
-- time a call adds this field list to this hash, then each add is one table update (a settlement
-- adds eight counters to two hashes).
local function hadd_all(k, fields, values)
  local e = H[k] or hentry(k)
  local v = e.v
  local n = #fields
  if e.all ~= fields then
    for i = 1, n do hadd(k, fields[i], 0) end
    e.all = fields
  end
  for i = 1, n do
    local f = fields[i]
    v[f] = v[f] + values[i]
  end
end

local function hflush()
  for i = 1, #HK do
    local k = HK[i]
    local e = H[k]
    local d = e.d
    if #d > 0 then
      local v = e.v
      local set, del = {}, nil
      for j = 1, #d do
        local f = d[j]
        local x = v[f]
        if x == false then
          del = del or {}
          del[#del + 1] = f
        else
          set[#set + 1] = f
          set[#set + 1] = type(x) == 'number' and I(x) or x
        end
      end
      if #set > 0 then redis.call('HSET', k, unpack(set)) end
      if del then redis.call('HDEL', k, unpack(del)) end
      e.d, e.ds = {}, {}
    end
  end
  for i = 1, #HXK do
    local k = HXK[i]
    redis.call('PEXPIRE', k, HX[k])
  end
  HX, HXK = {}, {}
end

-- Concurrency slots of one scope, shared by every instance, under the keys base .. 'held' (lease
-- id → expiry), 'queue' (waiting id → arrival number, FIFO), 'waiters' (waiting id → expiry: a
-- waiter is kept only while its instance renews it), 'seq' (arrival counter), 'limit'. A released
-- or expired slot goes to the head of the queue at once; the grant is published on CH. Expired
-- leases and waiters are purged when they could be in anyone's way (a full scope, a queue).

-- A scope's queue and holder counts, read once per call (SLOTN[base] = { queued, held }) and kept in
-- step with the call's own fast-path changes; anything else that changes them drops the entry.
local SLOTN = {}
local function slot_counts(base)
  local c = SLOTN[base]
  if not c then
    c = { redis.call('ZCARD', base .. 'queue'), redis.call('ZCARD', base .. 'held') }
    SLOTN[base] = c
  end
  return c
end

local function slot_purge(base, now)
  SLOTN[base] = nil
  local queue, waiters = base .. 'queue', base .. 'waiters'
  redis.call('ZREMRANGEBYSCORE', base .. 'held', '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', now)
  for _, id in ipairs(gone) do redis.call('ZREM', queue, id) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now) end
end

-- Every key lives a little longer than the longest lease in it.
local function slot_keep(base)
  for _, s in ipairs({ 'held', 'queue', 'waiters', 'seq', 'limit' }) do redis.call('PEXPIRE', base .. s, 2 * LEASE) end
end

-- Hands free slots to the head of the queue; returns how many were granted.
local function slot_pump(base, now)
  SLOTN[base] = nil
  local held, queue = base .. 'held', base .. 'queue'
  if redis.call('ZCARD', queue) == 0 then return 0 end
  local limit = tonumber(redis.call('GET', base .. 'limit')) or 0
  local n = 0
  while redis.call('ZCARD', held) < limit do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then break end
    -- The grant lives no longer than its waiter would have: a dead instance's waiter (no longer
    -- renewed) must not turn a freed slot into a fresh full lease. A live one renews it at once.
    local until_ms = tonumber(redis.call('ZSCORE', base .. 'waiters', head)) or now
    redis.call('ZREM', queue, head)
    redis.call('ZREM', base .. 'waiters', head)
    redis.call('ZADD', held, math.min(now + LEASE, until_ms), head)
    redis.call('PUBLISH', CH, head)
    n = n + 1
  end
  if n > 0 then slot_keep(base) end
  return n
end

-- 1 granted, 0 queued, 2 queue full.
local function slot_acquire(base, id, limit, qsize, now)
  local held, queue = base .. 'held', base .. 'queue'
  local c = slot_counts(base)
  local nq, nh = c[1], c[2]
  if nq > 0 or nh >= limit then
    -- The latest limit, for slot_pump (a release serves the queue up to it): only the slow path
    -- needs it; whoever queues sets it.
    redis.call('SET', base .. 'limit', limit, 'PX', 2 * LEASE)
    slot_purge(base, now)
    slot_pump(base, now) -- a raised limit first serves those already waiting
    c = slot_counts(base)
    nq, nh = c[1], c[2]
  end
  if nq == 0 and nh < limit then
    redis.call('ZADD', held, now + LEASE, id)
    c[2] = nh + 1
    hexpire(held, 2 * LEASE)
    return 1
  elseif nq >= qsize then
    return 2
  end
  SLOTN[base] = nil
  redis.call('SET', base .. 'limit', limit, 'PX', 2 * LEASE)
  redis.call('ZADD', queue, redis.call('INCR', base .. 'seq'), id)
  redis.call('ZADD', base .. 'waiters', now + LEASE, id)
  slot_keep(base)
  return 0
end

-- Frees a slot (or a place in the queue) and serves the queue.
local function slot_free(base, id, now)
  local c = slot_counts(base)
  if redis.call('ZREM', base .. 'held', id) == 1 then
    c[2] = c[2] - 1
  elseif redis.call('ZREM', base .. 'queue', id) == 1 then
    redis.call('ZREM', base .. 'waiters', id)
    c[1] = c[1] - 1
  end
  if c[1] > 0 then
    slot_purge(base, now)
    slot_pump(base, now)
  end
end

-- Releases an admission record: takes its reservation back from every counter it holds; with
-- `undo` >= 1 its minute counts (RPM, free calls) when still in the same minute; with `undo` 2
-- (an admission refused in another slot) also the key windows it started, if still unused.
-- Frees the concurrency slot it holds or waits for, if any (`slot_now`: the time of Redis, or nil).
-- Deletes the record. Its counter changes are written by the caller's hflush().
-- The record (admit_op) is one string, LIST-separated: the reserve; the counters it holds
-- ("key\nfield\n..."); the minute counts it made ("key\nminute\n..."); the key windows it started
-- ("key\nwindow\nstart\n..."); then, with a slot, the slot's base key and lease id.
local function release_record(rec, undo, slot_now)
  local text = redis.call('GETDEL', rec)
  if not text then return false end
  local r = split(text, LIST)
  if r[5] then slot_free(r[5], r[6], slot_now or now_ms('0')) end
  local amount = tonumber(r[1])
  if amount > 0 then
    local p = hpairs(split_cached(r[2], '\n'))
    for i = 1, #p - 2, 3 do
      local v, f = p[i], p[i + 1]
      local x = v[f]
      if type(x) == 'number' then v[f] = x - amount else hadd(p[i + 2], f, -amount) end
    end
  end
  if undo >= 1 then
    local counted = split(r[3], '\n')
    for i = 1, #counted - 1, 2 do
      local k = counted[i]
      hwant(k, 'm', 'c')
      if hnum(k, 'm') == tonumber(counted[i + 1]) and hnum(k, 'c') > 0 then hadd(k, 'c', -1) end
    end
  end
  if undo >= 2 then
    local started = split(r[4], '\n')
    for i = 1, #started - 2, 3 do
      local k, w = started[i], started[i + 1]
      hwant(k, w .. ':s', w .. ':u')
      if hnum(k, w .. ':s') == tonumber(started[i + 2]) and hnum(k, w .. ':u') == 0 then
        hdel(k, w .. ':s')
        hdel(k, w .. ':u')
      end
    end
  end
  return true
end
