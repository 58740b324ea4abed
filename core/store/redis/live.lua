-- The registry of live instances (id → lease expiry), kept by each instance's heartbeat. The
-- reaper on any live instance resolves the admissions of instances whose lease ran out.
--
-- KEYS[1] registry   KEYS[2] epoch (beat)   ARGV[1] op: beat | dead | forget   ARGV[2] instance id
-- ARGV[3] lease (ms)   ARGV[4] registry TTL (ms)   ARGV[5] (beat) an epoch to set if there is none
-- beat → { 1 when the instance was registered already, 0 when (re)registered (it had been reaped,
--          or Redis lost its data); the epoch }
-- dead → ids whose lease expired   forget → 1
--
-- The epoch names this Redis's data: set by the first beat that finds none, kept as long as the
-- registry. An instance that sees it change knows Redis lost its data (restarted empty, flushed, a
-- failover to a replica without it) rather than that it was taken for dead itself (reaper.ts).

local now = now_ms('0')
local op = ARGV[1]
if op == 'beat' then
  local added = redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  local epoch = redis.call('GET', KEYS[2])
  if not epoch then
    epoch = ARGV[5]
    redis.call('SET', KEYS[2], epoch)
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return { added == 1 and 0 or 1, epoch }
elseif op == 'dead' then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
elseif op == 'forget' then
  -- Not if it came back meanwhile (a network partition, not a death).
  local lease = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[2]))
  if lease ~= nil and lease <= now then redis.call('ZREM', KEYS[1], ARGV[2]) end
  return 1
end
return redis.error_reply('ERR unknown op ' .. tostring(op))
