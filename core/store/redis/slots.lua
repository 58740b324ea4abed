-- Concurrency slots of one scope, shared by every instance. A slot is a lease (held: id → expiry)
-- that its instance renews; the wait queue is global and FIFO (queue: id → arrival number), and a
-- waiter is kept only while its instance renews it (waiters: id → expiry). A released or expired
-- slot goes to the head of the queue at once; the grant is published on the wake channel.
--
-- KEYS[1] held   KEYS[2] queue   KEYS[3] waiter expiry   KEYS[4] arrival counter   KEYS[5] limit
-- ARGV[1] op: acquire | poll | release | leave | renew   ARGV[2] lease (ms)   ARGV[3] wake channel
-- acquire: ARGV[4] id, ARGV[5] limit, ARGV[6] queue size → 1 granted, 0 queued, 2 queue full
-- poll:    ARGV[4] id → 1 granted, 0 waiting, 3 unknown (its waiter expired)
-- release: ARGV[4] id → 1
-- leave:   ARGV[4] id → 0 left the queue, 1 it had been granted meanwhile, 3 unknown
-- renew:   ARGV[4] number of held ids, then held ids, then waiter ids → ids no longer known

local now = now_ms('0')
local op = ARGV[1]
local lease = tonumber(ARGV[2])
local held, queue, waiters, seq, limkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local function purge()
  redis.call('ZREMRANGEBYSCORE', held, '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', now)
  for _, id in ipairs(gone) do redis.call('ZREM', queue, id) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now) end
end

-- Hands free slots to the head of the queue.
local function pump()
  local limit = tonumber(redis.call('GET', limkey)) or 0
  while redis.call('ZCARD', held) < limit do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then break end
    -- The grant lives no longer than its waiter would have: a dead instance's waiter (no longer
    -- renewed) must not turn a freed slot into a fresh full lease. A live one renews it at once.
    local until_ms = tonumber(redis.call('ZSCORE', waiters, head)) or now
    redis.call('ZREM', queue, head)
    redis.call('ZREM', waiters, head)
    redis.call('ZADD', held, math.min(now + lease, until_ms), head)
    redis.call('PUBLISH', ARGV[3], head)
  end
end

-- Every key lives a little longer than the longest lease in it.
local function keep()
  for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], 2 * lease) end
end

local result
if op == 'acquire' then
  local id, limit, qsize = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  redis.call('SET', limkey, limit)
  purge()
  pump() -- a raised limit first serves those already waiting
  if redis.call('ZCARD', queue) == 0 and redis.call('ZCARD', held) < limit then
    redis.call('ZADD', held, now + lease, id)
    result = 1
  elseif redis.call('ZCARD', queue) >= qsize then
    result = 2
  else
    redis.call('ZADD', queue, redis.call('INCR', seq), id)
    redis.call('ZADD', waiters, now + lease, id)
    result = 0
  end
elseif op == 'poll' then
  local id = ARGV[4]
  purge()
  pump()
  if redis.call('ZSCORE', held, id) then
    result = 1
  elseif redis.call('ZSCORE', queue, id) then
    redis.call('ZADD', waiters, now + lease, id)
    result = 0
  else
    result = 3
  end
elseif op == 'release' then
  redis.call('ZREM', held, ARGV[4])
  purge()
  pump()
  result = 1
elseif op == 'leave' then
  local id = ARGV[4]
  if redis.call('ZREM', queue, id) == 1 then
    redis.call('ZREM', waiters, id)
    result = 0
  elseif redis.call('ZSCORE', held, id) then
    result = 1
  else
    result = 3
  end
elseif op == 'renew' then
  local nheld = tonumber(ARGV[4])
  local lost = {}
  for i = 5, 4 + nheld do
    if redis.call('ZADD', held, 'XX', 'CH', now + lease, ARGV[i]) == 0 and not redis.call('ZSCORE', held, ARGV[i]) then
      table.insert(lost, ARGV[i])
    end
  end
  for i = 5 + nheld, #ARGV do
    if redis.call('ZSCORE', queue, ARGV[i]) then
      redis.call('ZADD', waiters, now + lease, ARGV[i])
    elseif redis.call('ZSCORE', held, ARGV[i]) then
      -- Granted since the instance last looked: its holder is alive, so the grant is renewed too.
      redis.call('ZADD', held, 'XX', now + lease, ARGV[i])
    else
      table.insert(lost, ARGV[i])
    end
  end
  purge()
  pump()
  keep()
  return lost
else
  return redis.error_reply('ERR unknown slot op ' .. tostring(op))
end
keep()
return result
