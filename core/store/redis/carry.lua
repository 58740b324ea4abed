-- What one instance counted and held on its own while Redis was away (carry.ts), added to the
-- shared limits in one step once Redis is back, before that instance serves from Redis again.
--
-- KEYS[1..n]  RPM minute hashes (fields m: minute, c: count, as admit_op writes them)
-- KEYS[n+1..] the held sets of concurrency slot scopes (lib.lua: base .. 'held')
-- ARGV[1] now ('0' = TIME)   ARGV[2] n   ARGV[3..2+2n] per RPM hash: the minute counted in, the count
-- ARGV[3+2n..] per held set: the lease id the local slot takes
-- Counts of a minute that is over are dropped (they no longer limit anything). Slots are added
-- whatever the limit: their requests are running; a full scope serves its queue as they end.
-- Returns the counts added.

local now = now_ms(ARGV[1])
local minute = math.floor(now / MINUTE)
local n = tonumber(ARGV[2])
local added = 0
for i = 1, n do
  local k, m, c = KEYS[i], tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  if m == minute and c > 0 then
    hwant2(k, 'm', 'c')
    if hnum(k, 'm') ~= minute then
      hput(k, 'm', minute)
      hput(k, 'c', c)
      hexpire(k, (minute + 1) * MINUTE - now + MINUTE)
    else
      hadd(k, 'c', c)
    end
    added = added + c
  end
end
for i = n + 1, #KEYS do
  local held = KEYS[i]
  redis.call('ZADD', held, now + LEASE, ARGV[2 + n + i])
  slot_keep(string.sub(held, 1, -5))
end
hflush()
return added
