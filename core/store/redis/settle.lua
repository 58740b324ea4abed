-- One settlement or crash recovery (ops.lua settle_op: keys, arguments and replies are described there).
local r = settle_op(KEYS, ARGV)
hflush()
ledger_flush()
return r
