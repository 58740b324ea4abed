-- Settlement: replaces the admission's reservation with the actual charge, once per request id
-- (the done marker), records the usage, and frees the admission's concurrency slot. Also crash
-- recovery (mode 'r'): applies the recovery settlement of an admission whose instance died, only
-- while its record still exists.
--
-- KEYS[1] admission record   KEYS[2] done marker   KEYS[3] instance index (KEYS[1] when none)
-- KEYS[4] instance registry (recovery on a single Redis; else KEYS[1])
-- ARGV[1] now ('0' = TIME)   ARGV[2] mode: s settle | r recover   ARGV[3] request id (index field)
-- ARGV[4] the instance that admitted it   ARGV[5] effects: key 0/1, user 0/1 (on a cluster a part
-- applies only those in its own hash slot)   ARGV[6] key tag   ARGV[7] user tag
-- ARGV[8] the settlement, SEP-separated (index.ts packSettlement): key, user, group, model,
--   billing (balance | plan), actual, cost, input, output, cache read, cache write tokens,
--   duration ms, key windows "5h,1d", estimated 0/1
-- Returns 1 applied, 0 already settled, 2 already resolved by crash recovery, 3 nothing to recover,
-- 4 not recovered: the instance is alive after all (it renewed its lease since the reaper looked).

local now = now_ms(ARGV[1])
local mode = ARGV[2]
local function unindex()
  if KEYS[3] ~= KEYS[1] then redis.call('HDEL', KEYS[3], ARGV[3]) end
end

if mode == 'r' then
  if redis.call('EXISTS', KEYS[1]) == 0 then unindex(); return 3 end
  if KEYS[4] ~= KEYS[1] and (tonumber(redis.call('ZSCORE', KEYS[4], ARGV[4])) or 0) > now_ms('0') then return 4 end
else
  local done = redis.call('GET', KEYS[2])
  if done == 's' then unindex(); return 0 end
  if done == 'r' then unindex(); return 2 end
end

local s = split(ARGV[8], SEP)
local group, model, billing, actual, cost = s[3], s[4], s[5], tonumber(s[6]), tonumber(s[7])
local input, output, cr, cw, dur = tonumber(s[8]), tonumber(s[9]), tonumber(s[10]), tonumber(s[11]), tonumber(s[12])
local doKey, doUser = string.sub(ARGV[5], 1, 1) == '1', string.sub(ARGV[5], 2, 2) == '1'
local COUNTERS = { 'requests', 'input', 'output', 'cacheRead', 'cacheWrite', 'cost', 'actual', 'durationMs' }

-- Every field this settlement reads, declared before the record's release touches the same hashes.
local kc, totals, dayrec, ring, wallet, caps, plan
local windows = split(s[13], ',')
local sec = math.floor(now / 1000)
local slot = tostring(sec % 60)
local day = day_key(now)
if doKey then
  kc, totals, ring = key(ARGV[6], 'counters'), key(ARGV[6], 'totals'), key(ARGV[6], 'ring')
  dayrec = key(ARGV[6], 'day:' .. day)
  hwant(kc, 'used')
  for _, w in ipairs(windows) do hwant(kc, w .. ':s', w .. ':u') end
  hwant(totals, unpack(COUNTERS))
  hwant(totals, 'estimatedRequests', 'recoveredRequests')
  for _, c in ipairs(COUNTERS) do hwant(dayrec, model .. '|' .. c) end
  hwant(ring, 's' .. slot, 'r' .. slot, 't' .. slot)
end
if doUser then
  local u = ARGV[7]
  if billing == 'balance' then
    wallet, caps = key(u, 'wallet'), key(u, 'caps')
    hwant(wallet, 'spent', 'res')
    hwant(caps, 'ws', 'wu', 'ms', 'mu')
  else
    plan = key(u, 'plan:' .. group)
    hwant(plan, 'ds', 'du', 'ws', 'wu', 'ms', 'mu', 'res')
  end
end

release_record(KEYS[1], 0, (ARGV[1] == '0') and now or nil)
redis.call('SET', KEYS[2], mode, 'PX', DONE_TTL)
unindex()

local new_day, new_sec = false, false
if doKey then
  hadd(kc, 'used', actual)
  for _, w in ipairs(windows) do
    local start = tonumber(hraw(kc, w .. ':s'))
    if start == nil or now >= start + WINDOW_MS[w] then
      hput(kc, w .. ':s', now)
      hput(kc, w .. ':u', 0)
    end
    hadd(kc, w .. ':u', actual)
  end

  local values = { 1, input, output, cr, cw, cost, actual, dur }
  new_day = hraw(dayrec, model .. '|requests') == false
  for i, c in ipairs(COUNTERS) do
    hadd(totals, c, values[i])
    hadd(dayrec, model .. '|' .. c, values[i])
  end
  if s[14] == '1' then hadd(totals, 'estimatedRequests', 1) end
  if mode == 'r' then hadd(totals, 'recoveredRequests', 1) end

  if hnum(ring, 's' .. slot) ~= sec then
    hput(ring, 's' .. slot, sec)
    hput(ring, 'r' .. slot, 0)
    hput(ring, 't' .. slot, 0)
    new_sec = true
  end
  hadd(ring, 'r' .. slot, 1)
  hadd(ring, 't' .. slot, input + output + cr + cw)
end

if doUser then
  local function roll_add(h, sf, uf, start)
    if hnum(h, sf) ~= start then
      hput(h, sf, start)
      hput(h, uf, 0)
    end
    hadd(h, uf, actual)
  end
  if billing == 'balance' then
    hadd(wallet, 'spent', actual)
    roll_add(caps, 'ws', 'wu', week_start(now))
    roll_add(caps, 'ms', 'mu', month_start(now))
  else
    roll_add(plan, 'ds', 'du', day_start(now))
    roll_add(plan, 'ws', 'wu', week_start(now))
    roll_add(plan, 'ms', 'mu', month_start(now))
  end
end

hflush()
if new_day then redis.call('ZADD', key(ARGV[6], 'days'), 0, day) end
-- Only the last 60 s are read: the ring goes once nothing was recorded for two minutes.
if new_sec then redis.call('PEXPIRE', ring, 2 * MINUTE) end
return 1
