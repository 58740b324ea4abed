-- The health of upstream accounts (core/pool), shared by every instance (upstreams.ts): one hash,
-- a field per account (`<provider>/<account>`) holding its record, and `_v`, the version.
--
-- A record, SEP-separated: fingerprint, cooling until (epoch ms, 0 none), cooldown reason,
-- consecutive failures, disabled at (epoch ms, '' none), disabled status ('' none), disabled
-- message, times to first token ("at:ms" items, ','-separated, oldest first).
--
-- KEYS[1] the hash   ARGV[1] op
-- report: ARGV[2] the hash's TTL (ms)   ARGV[3] the announcement channel   ARGV[4..] events, each
--   SEP-separated: kind, account, fingerprint, then per kind
--     f (failure): until, reason   s (success)   d (disable): at, status, message   e (enable)
--     t (ttft): at, ms
--   (the rules are at core/store/types.ts AccountHealthEvent) → the version after them; a
--   failure, disable or enable is announced on the channel.
-- read: ARGV[2] the version the caller has ('' none) → false when it is still current, else the
--   hash as a flat list (field, value, ...).

local TTFT_SAMPLES = 8
local op = ARGV[1]
local H = KEYS[1]

if op == 'read' then
  local v = redis.call('HGET', H, '_v')
  if ARGV[2] ~= '' and v == ARGV[2] then return false end
  return redis.call('HGETALL', H)
end
if op ~= 'report' then return redis.error_reply('ERR unknown op ' .. tostring(op)) end

local records = {}
local order = {}

local function record(account, fp)
  local r = records[account]
  if r == nil then
    local text = redis.call('HGET', H, account)
    if text then
      local f = split(text, SEP)
      r = { f[1], tonumber(f[2]) or 0, f[3] or '', tonumber(f[4]) or 0, f[5] or '', f[6] or '', f[7] or '', f[8] or '' }
    else
      r = false
    end
    order[#order + 1] = account
  end
  if not r or r[1] ~= fp then r = { fp, 0, '', 0, '', '', '', '' } end
  records[account] = r
  return r
end

local announce = false
for i = 4, #ARGV do
  local e = split(ARGV[i], SEP)
  local kind = e[1]
  local r = record(e[2], e[3])
  if kind == 'f' then
    local until_ms = tonumber(e[4]) or 0
    r[4] = r[4] + 1
    if until_ms >= r[2] then
      r[2] = until_ms
      r[3] = e[5] or ''
    end
    announce = true
  elseif kind == 's' then
    r[4] = 0
  elseif kind == 'd' then
    if r[5] == '' then
      r[5], r[6], r[7] = e[4] or '0', e[5] or '', e[6] or ''
    end
    announce = true
  elseif kind == 'e' then
    r[5], r[6], r[7] = '', '', ''
    announce = true
  elseif kind == 't' then
    local samples = split(r[8], ',')
    samples[#samples + 1] = (e[4] or '0') .. ':' .. (e[5] or '0')
    local from = math.max(1, #samples - TTFT_SAMPLES + 1)
    r[8] = table.concat(samples, ',', from, #samples)
  else
    return redis.error_reply('ERR unknown account health event ' .. tostring(kind))
  end
end

local set = {}
for _, account in ipairs(order) do
  local r = records[account]
  set[#set + 1] = account
  set[#set + 1] = table.concat({ r[1], I(r[2]), r[3], I(r[4]), r[5], r[6], r[7], r[8] }, SEP)
end
if #set > 0 then redis.call('HSET', H, unpack(set)) end
local v = redis.call('HINCRBY', H, '_v', 1)
redis.call('PEXPIRE', H, ARGV[2])
if announce then redis.call('PUBLISH', ARGV[3], v) end
return v
