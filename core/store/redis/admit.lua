-- Admission: checks every claim, then applies them all (reservations, RPM counts, window starts)
-- or nothing; then, when asked, takes the request's concurrency slot (checked last). One call per
-- admission on a single Redis; one per hash slot (part) on a cluster.
--
-- KEYS[1] admission record   KEYS[2] done marker   KEYS[3] instance index (KEYS[1] when none)
-- ARGV[1] now ('0' = TIME)   ARGV[2] reserve   ARGV[3] request id (index field)
-- ARGV[4] index entry ('' = none)
-- ARGV[5] claims, LIST-separated; each SEP-separated: global index, kind, hash tag, parameters
--   b balance (u:<user>; credit, free 0/1, freeRpm)   p plan (u:<user>; group, daily, weekly, monthly)
--   q key quota (k:<key>; limit)   w key window (k:<key>; name, limit, duration)
--   c spend cap (u:<user>; w|m, limit)   r rpm (u:, g: or a: tag; limit)
-- ARGV[6] the concurrency slot ('' = none): tag SEP lease id SEP limit SEP queue size
-- Returns {1} admitted ({1, s} with a slot: s = 1 granted, 0 queued, 2 queue full),
-- {0, failIndex, retryAfterMs, -1} refused outright (the first such claim),
-- {0, -1, -1, heldIndex} refused only by reservations in flight; -1 = none.

local now = now_ms(ARGV[1])
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then
  return redis.error_reply('ERR request already admitted')
end
local reserve = tonumber(ARGV[2])
local minute = math.floor(now / MINUTE)
local until_next = (minute + 1) * MINUTE - now

-- Parse, and declare every field the checks read (one HMGET per hash).
local claims = {}
for _, text in ipairs(split(ARGV[5], LIST)) do
  local f = split(text, SEP)
  local kind, tag = f[2], f[3]
  local c = { idx = tonumber(f[1]), kind = kind, a = f[4], b = f[5], c = f[6], d = f[7] }
  if kind == 'b' then
    c.k1, c.k2 = key(tag, 'wallet'), key(tag, 'free')
    hwant(c.k1, 'spent', 'res')
  elseif kind == 'p' then
    c.k1 = key(tag, 'plan:' .. c.a)
    hwant(c.k1, 'ds', 'du', 'ws', 'wu', 'ms', 'mu', 'res')
  elseif kind == 'q' then
    c.k1 = key(tag, 'counters')
    hwant(c.k1, 'used', 'res')
  elseif kind == 'w' then
    c.k1 = key(tag, 'counters')
    hwant(c.k1, c.a .. ':s', c.a .. ':u', c.a .. ':r')
  elseif kind == 'c' then
    c.k1 = key(tag, 'caps')
    hwant(c.k1, c.a .. 's', c.a .. 'u', c.a .. 'r')
  elseif kind == 'r' then
    c.k1 = key(tag, 'rpm')
    hwant(c.k1, 'm', 'c')
  else
    return redis.error_reply('ERR unknown claim kind ' .. tostring(kind))
  end
  table.insert(claims, c)
end

local actions = {}
local held_at = -1

for _, cl in ipairs(claims) do
  local kind, k1, k2 = cl.kind, cl.k1, cl.k2
  local p1, p2, p3 = cl.a, cl.b, cl.c
  local fail, retry, held = false, -1, false

  if kind == 'b' then
    local credit, spent, res = tonumber(p1), hnum(k1, 'spent'), hnum(k1, 'res')
    if credit - spent - res > 0 then
      table.insert(actions, { 'hold', k1, 'res' })
    elseif p2 ~= '1' then
      if credit - spent > 0 then held = true else fail = true end
    else
      hwant(k2, 'm', 'c')
      local used = (hnum(k2, 'm') == minute) and hnum(k2, 'c') or 0
      local free_rpm = tonumber(p3)
      if free_rpm > 0 and used >= free_rpm then
        fail = true; retry = until_next
      else
        table.insert(actions, { 'hold', k1, 'res' })
        table.insert(actions, { 'count', k2 })
      end
    end
  elseif kind == 'p' then
    local res = hnum(k1, 'res')
    local periods = {
      { 'ds', 'du', day_start(now), tonumber(p2) },
      { 'ws', 'wu', week_start(now), tonumber(p3) },
      { 'ms', 'mu', month_start(now), tonumber(cl.d) },
    }
    for _, p in ipairs(periods) do
      if p[4] > 0 and not fail then
        local used = (hnum(k1, p[1]) == p[3]) and hnum(k1, p[2]) or 0
        if used >= p[4] then fail = true
        elseif used + res >= p[4] then held = true end
      end
    end
    if fail then held = false end
    if not fail and not held then table.insert(actions, { 'hold', k1, 'res' }) end
  elseif kind == 'q' then
    local limit, used, res = tonumber(p1), hnum(k1, 'used'), hnum(k1, 'res')
    if limit > 0 and used >= limit then fail = true
    elseif limit > 0 and used + res >= limit then held = true
    else table.insert(actions, { 'hold', k1, 'res' }) end
  elseif kind == 'w' then
    local limit, dur = tonumber(p2), tonumber(p3)
    local start = tonumber(hraw(k1, p1 .. ':s'))
    local restart = start == nil or now >= start + dur
    local used = restart and 0 or hnum(k1, p1 .. ':u')
    local res = hnum(k1, p1 .. ':r')
    if limit > 0 and used >= limit then fail = true
    elseif limit > 0 and used + res >= limit then held = true
    else
      if restart then table.insert(actions, { 'wstart', k1, p1 }) end
      table.insert(actions, { 'hold', k1, p1 .. ':r' })
    end
  elseif kind == 'c' then
    local limit = tonumber(p2)
    local start = (p1 == 'w') and week_start(now) or month_start(now)
    local used = (hnum(k1, p1 .. 's') == start) and hnum(k1, p1 .. 'u') or 0
    local res = hnum(k1, p1 .. 'r')
    if limit > 0 and used < limit and used + res >= limit then held = true
    elseif limit > 0 and used >= limit then
      fail = true
      retry = ((p1 == 'w') and (start + 7 * DAY) or next_month_start(now)) - now
    else table.insert(actions, { 'hold', k1, p1 .. 'r' }) end
  elseif kind == 'r' then
    local used = (hnum(k1, 'm') == minute) and hnum(k1, 'c') or 0
    local limit = tonumber(p1)
    if limit > 0 and used >= limit then
      fail = true; retry = until_next
    else table.insert(actions, { 'count', k1 }) end
  end

  -- A held claim is reported only if no later claim is refused outright: exhaustion wins.
  if fail then return { 0, cl.idx, retry, -1 } end
  if held and held_at < 0 then held_at = cl.idx end
end
if held_at >= 0 then return { 0, -1, -1, held_at } end

local holds, counted, started, fresh = {}, {}, {}, {}
local m = I(minute)
for _, act in ipairs(actions) do
  local kind, k = act[1], act[2]
  if kind == 'hold' then
    if reserve > 0 then hadd(k, act[3], reserve) end
    table.insert(holds, k); table.insert(holds, act[3])
  elseif kind == 'count' then
    if hnum(k, 'm') ~= minute then
      hput(k, 'm', minute)
      hput(k, 'c', 1)
      -- Kept one minute past its own, then gone (set once per minute: the same instant each time).
      table.insert(fresh, k)
    else
      hadd(k, 'c', 1)
    end
    table.insert(counted, k); table.insert(counted, m)
  elseif kind == 'wstart' then
    hput(k, act[3] .. ':s', now)
    hput(k, act[3] .. ':u', 0)
    table.insert(started, k); table.insert(started, act[3]); table.insert(started, I(now))
  end
end
hflush()
for _, k in ipairs(fresh) do redis.call('PEXPIRE', k, until_next + MINUTE) end

local reply = { 1 }
local record = { 'r', ARGV[2], 'h', table.concat(holds, '\n'), 'c', table.concat(counted, '\n'), 'w', table.concat(started, '\n') }
if ARGV[6] ~= '' then
  local s = split(ARGV[6], SEP)
  local base = key(s[1], 'slot:')
  local got = slot_acquire(base, s[2], tonumber(s[3]), tonumber(s[4]), (ARGV[1] == '0') and now or now_ms('0'))
  -- Held or queued, the slot goes with the record: its settlement or cancel frees it (lib.lua).
  if got ~= 2 then
    table.insert(record, 'sb'); table.insert(record, base)
    table.insert(record, 'si'); table.insert(record, s[2])
  end
  reply[2] = got
end
redis.call('HSET', KEYS[1], unpack(record))
redis.call('PEXPIRE', KEYS[1], RECORD_TTL)
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[3], RECORD_TTL)
end
return reply
