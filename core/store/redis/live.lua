-- The registry of live instances (id → lease expiry), kept by each instance's heartbeat. The
-- reaper on any live instance resolves the admissions of instances whose lease ran out.
--
-- KEYS[1] registry   ARGV[1] op: beat | dead | forget   ARGV[2] instance id   ARGV[3] lease (ms)
-- ARGV[4] registry TTL (ms)
-- beat → 1 when the instance was registered already, 0 when (re)registered (it had been reaped)
-- dead → ids whose lease expired   forget → 1

local now = now_ms('0')
local op = ARGV[1]
if op == 'beat' then
  local added = redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return added == 1 and 0 or 1
elseif op == 'dead' then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
elseif op == 'forget' then
  -- Not if it came back meanwhile (a network partition, not a death).
  local lease = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[2]))
  if lease ~= nil and lease <= now then redis.call('ZREM', KEYS[1], ARGV[2]) end
  return 1
end
return redis.error_reply('ERR unknown op ' .. tostring(op))
