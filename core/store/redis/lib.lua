-- Shared by every script: prepended to each one when the scripts are loaded (Redis scripts cannot
-- include one another). Integers only: amounts arrive as decimal strings and are written back with
-- I(), so no float ever reaches a counter (Lua numbers are doubles, exact up to 2^53).

local DAY = 86400000
local MINUTE = 60000

-- Milliseconds from the server's clock; tests pass a fixed time instead ('0' = use TIME).
local function now_ms(override)
  if override ~= nil and override ~= '0' and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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

local function month_start(t)
  local y, m = civil(math.floor(t / DAY))
  return days_from_civil(y, m, 1) * DAY
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

local function split(s, sep)
  local out = {}
  if s == nil or s == false or s == '' then return out end
  local from = 1
  while true do
    local i = string.find(s, sep, from, true)
    if not i then
      table.insert(out, string.sub(s, from))
      return out
    end
    table.insert(out, string.sub(s, from, i - 1))
    from = i + #sep
  end
end

-- Releases an admission record: takes its reservation back from every counter it holds; with
-- `undo` >= 1 its minute counts (RPM, free calls) when still in the same minute; with `undo` 2
-- (an admission refused in another slot) also the key windows it started, if still unused.
-- Deletes the record.
local function release_record(rec, undo)
  local r = redis.call('HMGET', rec, 'r', 'h', 'c', 'w')
  if not r[1] then return false end
  local amount = tonumber(r[1])
  local held = split(r[2], '\n')
  if amount > 0 then
    for i = 1, #held - 1, 2 do
      redis.call('HINCRBY', held[i], held[i + 1], I(-amount))
    end
  end
  if undo >= 1 then
    local counted = split(r[3], '\n')
    for i = 1, #counted - 1, 2 do
      local k = counted[i]
      local m = redis.call('HMGET', k, 'm', 'c')
      if m[1] == counted[i + 1] and num(m[2]) > 0 then redis.call('HINCRBY', k, 'c', -1) end
    end
  end
  if undo >= 2 then
    local started = split(r[4], '\n')
    for i = 1, #started - 2, 3 do
      local k, w = started[i], started[i + 1]
      local x = redis.call('HMGET', k, w .. ':s', w .. ':u')
      if x[1] == started[i + 2] and num(x[2]) == 0 then redis.call('HDEL', k, w .. ':s', w .. ':u') end
    end
  end
  redis.call('DEL', rec)
  return true
end
