-- Several operations in one call, in order: the admissions, settlements and cancels of one
-- event-loop turn on a single Redis (index.ts batches them). Each is what its own script would do
-- (ops.lua), and the whole batch is atomic; every hash they touch is read once and written once.
--
-- KEYS: the operations' keys, one after another. ARGV: for each operation its kind (a admit,
-- s settle, c cancel), its number of keys and of arguments, then its arguments.
-- Returns one reply per operation, in order, as its own script returns it; an admission of a
-- request id already admitted replies ALREADY (-1) instead of failing the batch.

local out = {}
local k, i, n = 1, 1, 0
while i <= #ARGV do
  local kind, nk, na = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local K = { unpack(KEYS, k, k + nk - 1) }
  local A = { unpack(ARGV, i + 3, i + 2 + na) }
  k = k + nk
  i = i + 3 + na
  n = n + 1
  if kind == 'a' then out[n] = admit_op(K, A)
  elseif kind == 's' then out[n] = settle_op(K, A)
  elseif kind == 'c' then out[n] = cancel_op(K, A)
  else return redis.error_reply('ERR unknown batch operation ' .. tostring(kind)) end
end
hflush()
return out
