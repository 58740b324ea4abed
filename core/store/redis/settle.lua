-- Settlement: replaces the admission's reservation with the actual charge, once per request id
-- (the done marker), and records the usage. Also crash recovery (mode 'r'): applies the recovery
-- settlement of an admission whose instance died, only while its record still exists.
--
-- KEYS[1] admission record   KEYS[2] done marker   KEYS[3] instance index (KEYS[1] when none)
-- KEYS[4] key counters   KEYS[5] usage totals   KEYS[6] days with usage (zset, by name)   KEYS[7] last-60-s ring
-- KEYS[8] wallet   KEYS[9] spend caps   KEYS[10] plan usage of (user, group)
--   (on a cluster a part carries only its own slot's keys; the others repeat KEYS[1], unused)
-- ARGV[1] now ('0' = TIME)   ARGV[2] mode: s settle | r recover   ARGV[3] key effects 0/1
-- ARGV[4] user effects 0/1   ARGV[5] actual   ARGV[6] cost   ARGV[7] billing: balance | plan
-- ARGV[8] windows "5h:<ms>,1d:<ms>"   ARGV[9..12] input, output, cache read, cache write tokens
-- ARGV[13] duration ms   ARGV[14] model   ARGV[15] day record key prefix   ARGV[16] estimated 0/1
-- ARGV[17] done marker TTL (ms)   ARGV[18] request id (index field)
-- Recovery only: KEYS[11] instance registry (KEYS[1] on a cluster), ARGV[19] the dead instance's id.
-- Returns 1 applied, 0 already settled, 2 already resolved by crash recovery, 3 nothing to recover,
-- 4 not recovered: the instance is alive after all (it renewed its lease since the reaper looked).

local now = now_ms(ARGV[1])
local mode = ARGV[2]
local function unindex()
  if KEYS[3] ~= KEYS[1] then redis.call('HDEL', KEYS[3], ARGV[18]) end
end

if mode == 'r' then
  if redis.call('EXISTS', KEYS[1]) == 0 then unindex(); return 3 end
  if KEYS[11] ~= KEYS[1] and (tonumber(redis.call('ZSCORE', KEYS[11], ARGV[19])) or 0) > now_ms('0') then return 4 end
else
  local done = redis.call('GET', KEYS[2])
  if done == 's' then unindex(); return 0 end
  if done == 'r' then unindex(); return 2 end
end

release_record(KEYS[1], 0)
redis.call('SET', KEYS[2], mode, 'PX', ARGV[17])
unindex()

local actual = ARGV[5]

if ARGV[3] == '1' then
  local key = KEYS[4]
  redis.call('HINCRBY', key, 'used', actual)
  for _, spec in ipairs(split(ARGV[8], ',')) do
    local parts = split(spec, ':')
    local w, dur = parts[1], tonumber(parts[2])
    local start = tonumber(redis.call('HGET', key, w .. ':s'))
    if start == nil or now >= start + dur then
      redis.call('HSET', key, w .. ':s', I(now), w .. ':u', 0)
    end
    redis.call('HINCRBY', key, w .. ':u', actual)
  end

  local input, output, cr, cw = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
  local function add(h, prefix)
    redis.call('HINCRBY', h, prefix .. 'requests', 1)
    redis.call('HINCRBY', h, prefix .. 'input', input)
    redis.call('HINCRBY', h, prefix .. 'output', output)
    redis.call('HINCRBY', h, prefix .. 'cacheRead', cr)
    redis.call('HINCRBY', h, prefix .. 'cacheWrite', cw)
    redis.call('HINCRBY', h, prefix .. 'cost', ARGV[6])
    redis.call('HINCRBY', h, prefix .. 'actual', actual)
    redis.call('HINCRBY', h, prefix .. 'durationMs', ARGV[13])
  end
  add(KEYS[5], '')
  if ARGV[16] == '1' then redis.call('HINCRBY', KEYS[5], 'estimatedRequests', 1) end
  if mode == 'r' then redis.call('HINCRBY', KEYS[5], 'recoveredRequests', 1) end
  local day = day_key(now)
  add(ARGV[15] .. day, ARGV[14] .. '|')
  redis.call('ZADD', KEYS[6], 0, day)

  local sec = math.floor(now / 1000)
  local slot = tostring(sec % 60)
  local ring = KEYS[7]
  if tonumber(redis.call('HGET', ring, 's' .. slot)) ~= sec then
    redis.call('HSET', ring, 's' .. slot, sec, 'r' .. slot, 0, 't' .. slot, 0)
  end
  redis.call('HINCRBY', ring, 'r' .. slot, 1)
  redis.call('HINCRBY', ring, 't' .. slot, I(tonumber(input) + tonumber(output) + tonumber(cr) + tonumber(cw)))
  -- Only the last 60 s are read: the ring goes once nothing was recorded for two minutes.
  redis.call('PEXPIRE', ring, 2 * MINUTE)
end

if ARGV[4] == '1' then
  local function roll_add(h, sf, uf, start)
    if num(redis.call('HGET', h, sf)) ~= start then redis.call('HSET', h, sf, I(start), uf, 0) end
    redis.call('HINCRBY', h, uf, actual)
  end
  if ARGV[7] == 'balance' then
    redis.call('HINCRBY', KEYS[8], 'spent', actual)
    roll_add(KEYS[9], 'ws', 'wu', week_start(now))
    roll_add(KEYS[9], 'ms', 'mu', month_start(now))
  else
    roll_add(KEYS[10], 'ds', 'du', day_start(now))
    roll_add(KEYS[10], 'ws', 'wu', week_start(now))
    roll_add(KEYS[10], 'ms', 'mu', month_start(now))
  end
end
return 1
