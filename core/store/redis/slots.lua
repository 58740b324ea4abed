-- Concurrency slots of one scope, apart from an admission (an admission takes its slot in admit.lua
-- and frees it with its record; the slot functions are in lib.lua).
--
-- KEYS[1..5] held, queue, waiter expiry, arrival counter, limit (one base: KEYS[1] minus 'held')
-- ARGV[1] op: acquire | poll | release | leave | renew | reclaim
-- acquire: ARGV[2] id, ARGV[3] limit, ARGV[4] queue size → 1 granted, 0 queued, 2 queue full
-- poll:    ARGV[2] id → 1 granted, 0 waiting, 3 unknown (its waiter expired)
-- release: ARGV[2] id → 1
-- leave:   ARGV[2] id → 0 left the queue, 1 it had been granted meanwhile, 3 unknown
-- renew:   ARGV[2] number of held ids, then held ids, then waiter ids → ids no longer known
-- reclaim: ARGV[2] id of a lease its instance lost, ARGV[3] limit → 1 held again, 0 the scope is
--          full or has a queue (its instance ends the request: fencing, slots.ts)

local now = now_ms('0')
local op = ARGV[1]
local base = string.sub(KEYS[1], 1, -5)
local held, queue, waiters = KEYS[1], KEYS[2], KEYS[3]

if op == 'acquire' then
  local got = slot_acquire(base, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), now)
  hflush() -- the held set's expiry
  return got
elseif op == 'poll' then
  local id = ARGV[2]
  slot_purge(base, now)
  slot_pump(base, now)
  if redis.call('ZSCORE', held, id) then return 1 end
  if redis.call('ZSCORE', queue, id) then
    redis.call('ZADD', waiters, now + LEASE, id)
    slot_keep(base)
    return 0
  end
  return 3
elseif op == 'release' then
  slot_free(base, ARGV[2], now)
  return 1
elseif op == 'leave' then
  local id = ARGV[2]
  if redis.call('ZREM', queue, id) == 1 then
    redis.call('ZREM', waiters, id)
    return 0
  elseif redis.call('ZSCORE', held, id) then
    return 1
  end
  return 3
elseif op == 'renew' then
  local nheld = tonumber(ARGV[2])
  local lost = {}
  for i = 3, 2 + nheld do
    if redis.call('ZADD', held, 'XX', 'CH', now + LEASE, ARGV[i]) == 0 and not redis.call('ZSCORE', held, ARGV[i]) then
      table.insert(lost, ARGV[i])
    end
  end
  for i = 3 + nheld, #ARGV do
    if redis.call('ZSCORE', queue, ARGV[i]) then
      redis.call('ZADD', waiters, now + LEASE, ARGV[i])
    elseif redis.call('ZSCORE', held, ARGV[i]) then
      -- Granted since the instance last looked: its holder is alive, so the grant is renewed too.
      redis.call('ZADD', held, 'XX', now + LEASE, ARGV[i])
    else
      table.insert(lost, ARGV[i])
    end
  end
  slot_purge(base, now)
  slot_pump(base, now)
  slot_keep(base)
  return lost
elseif op == 'reclaim' then
  local id, limit = ARGV[2], tonumber(ARGV[3])
  slot_purge(base, now)
  slot_pump(base, now)
  if redis.call('ZSCORE', held, id) then
    redis.call('ZADD', held, now + LEASE, id)
  elseif redis.call('ZCARD', queue) == 0 and redis.call('ZCARD', held) < limit then
    redis.call('ZADD', held, now + LEASE, id)
  else
    return 0
  end
  slot_keep(base)
  return 1
end
return redis.error_reply('ERR unknown slot op ' .. tostring(op))
