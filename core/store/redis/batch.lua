-- Several operations in one call, in order: the admissions, settlements and cancels of one
-- event-loop turn on a single Redis (client.ts batches them). Each is what its own script would do
-- (ops.lua), and the whole batch is atomic; every hash they touch is read once and written once,
-- and the settlements' ledger records go to their stream as one entry.
--
-- ARGV: one argument per operation, its fields separated by \28: its kind (a admit, s settle,
-- c cancel), its number of keys, its keys, then its arguments (as its own script takes them).
-- Returns one reply per operation, in order, as its own script returns it; an admission of a
-- request id already admitted replies ALREADY (-1) instead of failing the batch.

local out = {}
for n = 1, #ARGV do
  local f = split(ARGV[n], '\28')
  local kind, nk = f[1], tonumber(f[2])
  local K = { unpack(f, 3, 2 + nk) }
  local A = { unpack(f, 3 + nk) }
  if kind == 'a' then out[n] = admit_op(K, A)
  elseif kind == 's' then out[n] = settle_op(K, A)
  elseif kind == 'c' then out[n] = cancel_op(K, A)
  else return redis.error_reply('ERR unknown batch operation ' .. tostring(kind)) end
end
hflush()
ledger_flush()
return out
