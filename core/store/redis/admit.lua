-- Admission: checks every claim, then applies them all (reservations, RPM counts, window starts)
-- or nothing. One call per admission on a single Redis; one per hash slot (part) on a cluster.
--
-- KEYS[1] admission record   KEYS[2] done marker   KEYS[3] instance index (KEYS[1] when none)
-- KEYS[2 + 2i], KEYS[3 + 2i]  the counters of claim i (the second repeats the first when unused)
-- ARGV[1] now ('0' = TIME)   ARGV[2] reserve   ARGV[3] record and index TTL (ms)
-- ARGV[4] request id (index field)   ARGV[5] index entry ('' = none)   ARGV[6] number of claims
-- then per claim 6 values: global index, kind, p1, p2, p3, p4
--   b balance (credit, free 0/1, freeRpm)   p plan (daily, weekly, monthly)   q key quota (limit)
--   w key window (name, limit, duration)   c spend cap (w|m, limit)   r rpm (limit)
-- Returns {1} admitted, {0, failIndex, retryAfterMs, -1} refused outright (the first such claim),
-- {0, -1, -1, heldIndex} refused only by reservations in flight; -1 = none.

local now = now_ms(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('ERR request already admitted')
end
local reserve = tonumber(ARGV[2])
local ttl = ARGV[3]
local n = tonumber(ARGV[6])
local minute = math.floor(now / MINUTE)
local until_next = (minute + 1) * MINUTE - now

local actions = {}
local held_at = -1

local function hget(k, f) return redis.call('HGET', k, f) end

for i = 1, n do
  local a = 6 + (i - 1) * 6
  local idx, kind = tonumber(ARGV[a + 1]), ARGV[a + 2]
  local p1, p2, p3, p4 = ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]
  local k1, k2 = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local fail, retry, held = false, -1, false

  if kind == 'b' then
    local w = redis.call('HMGET', k1, 'spent', 'res')
    local credit, spent, res = tonumber(p1), num(w[1]), num(w[2])
    if credit - spent - res > 0 then
      table.insert(actions, { 'hold', k1, 'res' })
    elseif p2 ~= '1' then
      if credit - spent > 0 then held = true else fail = true end
    else
      local f = redis.call('HMGET', k2, 'm', 'c')
      local used = (tonumber(f[1]) == minute) and num(f[2]) or 0
      local free_rpm = tonumber(p3)
      if free_rpm > 0 and used >= free_rpm then
        fail = true; retry = until_next
      else
        table.insert(actions, { 'hold', k1, 'res' })
        table.insert(actions, { 'count', k2 })
      end
    end
  elseif kind == 'p' then
    local h = redis.call('HMGET', k1, 'ds', 'du', 'ws', 'wu', 'ms', 'mu', 'res')
    local res = num(h[7])
    local periods = {
      { num(h[1]), num(h[2]), day_start(now), tonumber(p1) },
      { num(h[3]), num(h[4]), week_start(now), tonumber(p2) },
      { num(h[5]), num(h[6]), month_start(now), tonumber(p3) },
    }
    for _, p in ipairs(periods) do
      if p[4] > 0 and not fail then
        local used = (p[1] == p[3]) and p[2] or 0
        if used >= p[4] then fail = true
        elseif used + res >= p[4] then held = true end
      end
    end
    if fail then held = false end
    if not fail and not held then table.insert(actions, { 'hold', k1, 'res' }) end
  elseif kind == 'q' then
    local h = redis.call('HMGET', k1, 'used', 'res')
    local limit, used, res = tonumber(p1), num(h[1]), num(h[2])
    if limit > 0 and used >= limit then fail = true
    elseif limit > 0 and used + res >= limit then held = true
    else table.insert(actions, { 'hold', k1, 'res' }) end
  elseif kind == 'w' then
    local h = redis.call('HMGET', k1, p1 .. ':s', p1 .. ':u', p1 .. ':r')
    local limit, dur = tonumber(p2), tonumber(p3)
    local start = tonumber(h[1])
    local restart = start == nil or now >= start + dur
    local used = restart and 0 or num(h[2])
    local res = num(h[3])
    if limit > 0 and used >= limit then fail = true
    elseif limit > 0 and used + res >= limit then held = true
    else
      if restart then table.insert(actions, { 'wstart', k1, p1 }) end
      table.insert(actions, { 'hold', k1, p1 .. ':r' })
    end
  elseif kind == 'c' then
    local h = redis.call('HMGET', k1, p1 .. 's', p1 .. 'u', p1 .. 'r')
    local limit = tonumber(p2)
    local start = (p1 == 'w') and week_start(now) or month_start(now)
    local used = (num(h[1]) == start) and num(h[2]) or 0
    local res = num(h[3])
    if limit > 0 and used < limit and used + res >= limit then held = true
    elseif limit > 0 and used >= limit then
      fail = true
      retry = ((p1 == 'w') and (start + 7 * DAY) or next_month_start(now)) - now
    else table.insert(actions, { 'hold', k1, p1 .. 'r' }) end
  elseif kind == 'r' then
    local h = redis.call('HMGET', k1, 'm', 'c')
    local used = (tonumber(h[1]) == minute) and num(h[2]) or 0
    local limit = tonumber(p1)
    if limit > 0 and used >= limit then
      fail = true; retry = until_next
    else table.insert(actions, { 'count', k1 }) end
  else
    return redis.error_reply('ERR unknown claim kind ' .. tostring(kind))
  end

  -- A held claim is reported only if no later claim is refused outright: exhaustion wins.
  if fail then return { 0, idx, retry, -1 } end
  if held and held_at < 0 then held_at = idx end
end
if held_at >= 0 then return { 0, -1, -1, held_at } end

local holds, counted, started = {}, {}, {}
local m = I(minute)
for _, act in ipairs(actions) do
  local kind, k = act[1], act[2]
  if kind == 'hold' then
    if reserve > 0 then redis.call('HINCRBY', k, act[3], ARGV[2]) end
    table.insert(holds, k); table.insert(holds, act[3])
  elseif kind == 'count' then
    if redis.call('HGET', k, 'm') ~= m then redis.call('HSET', k, 'm', m, 'c', 0) end
    redis.call('HINCRBY', k, 'c', 1)
    -- Kept one minute past its own, then gone.
    redis.call('PEXPIRE', k, until_next + MINUTE)
    table.insert(counted, k); table.insert(counted, m)
  elseif kind == 'wstart' then
    redis.call('HSET', k, act[3] .. ':s', I(now), act[3] .. ':u', 0)
    table.insert(started, k); table.insert(started, act[3]); table.insert(started, I(now))
  end
end
redis.call('HSET', KEYS[1], 'r', ARGV[2], 'h', table.concat(holds, '\n'), 'c', table.concat(counted, '\n'), 'w', table.concat(started, '\n'))
redis.call('PEXPIRE', KEYS[1], ttl)
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return { 1 }
