-- Reads that depend on the server's clock (periods, windows, the last 60 s).
-- ARGV[1] now ('0' = TIME)   ARGV[2] what:
--   key:   KEYS[1] key counters; ARGV[3] windows "5h:<ms>,1d:<ms>,7d:<ms>"
--          → {used, reserved, then per window: start (-1 = none), used, reserved}
--   plan:  KEYS[1] plan usage → {daily, weekly, monthly}
--   cap:   KEYS[1] spend caps → {weekly, monthly}
--   stats: KEYS[1] totals, KEYS[2] days (zset), KEYS[3] ring; ARGV[3] first day, ARGV[4] last day
--          (YYYY-MM-DD, compared as text), ARGV[5] day record key prefix
--          → {totals (flat hash), today (flat hash), rpm, tpm, then day, flat hash per day in range}
--   held:   KEYS[1] a slot scope's held set → the leases not expired (by TIME)
--   minute: KEYS[1] an RPM minute hash → {requests counted this minute, ms until it ends}

local now = now_ms(ARGV[1])
local what = ARGV[2]

if what == 'key' then
  local h = redis.call('HMGET', KEYS[1], 'used', 'res')
  local out = { num(h[1]), num(h[2]) }
  for _, spec in ipairs(split(ARGV[3], ',')) do
    local p = split(spec, ':')
    local w, dur = p[1], tonumber(p[2])
    local x = redis.call('HMGET', KEYS[1], w .. ':s', w .. ':u', w .. ':r')
    local start = tonumber(x[1])
    if start == nil or now >= start + dur then
      table.insert(out, -1); table.insert(out, 0)
    else
      table.insert(out, start); table.insert(out, num(x[2]))
    end
    table.insert(out, num(x[3]))
  end
  return out
elseif what == 'plan' then
  local h = redis.call('HMGET', KEYS[1], 'ds', 'du', 'ws', 'wu', 'ms', 'mu')
  local function used(s, u, start) return (num(s) == start) and num(u) or 0 end
  return { used(h[1], h[2], day_start(now)), used(h[3], h[4], week_start(now)), used(h[5], h[6], month_start(now)) }
elseif what == 'cap' then
  local h = redis.call('HMGET', KEYS[1], 'ws', 'wu', 'ms', 'mu')
  local function used(s, u, start) return (num(s) == start) and num(u) or 0 end
  return { used(h[1], h[2], week_start(now)), used(h[3], h[4], month_start(now)) }
elseif what == 'stats' then
  local prefix = ARGV[5]
  local out = { redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', prefix .. day_key(now)) }
  local nowsec = math.floor(now / 1000)
  local rpm, tpm = 0, 0
  local ring = redis.call('HGETALL', KEYS[3])
  local r = {}
  for i = 1, #ring, 2 do r[ring[i]] = tonumber(ring[i + 1]) end
  for slot = 0, 59 do
    local sec = r['s' .. slot]
    if sec ~= nil and sec > nowsec - 60 and sec <= nowsec then
      rpm = rpm + (r['r' .. slot] or 0)
      tpm = tpm + (r['t' .. slot] or 0)
    end
  end
  table.insert(out, rpm)
  table.insert(out, tpm)
  for _, day in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], '[' .. ARGV[3], '[' .. ARGV[4])) do
    table.insert(out, day)
    table.insert(out, redis.call('HGETALL', prefix .. day))
  end
  return out
elseif what == 'held' then
  -- Leases run on the server's clock whatever the test clock says (slots.lua).
  return redis.call('ZCOUNT', KEYS[1], '(' .. I(now_ms('0')), '+inf')
elseif what == 'minute' then
  local h = redis.call('HMGET', KEYS[1], 'm', 'c')
  local minute = math.floor(now / MINUTE)
  return { (num(h[1]) == minute) and num(h[2]) or 0, (minute + 1) * MINUTE - now }
end
return redis.error_reply('ERR unknown read ' .. tostring(what))
