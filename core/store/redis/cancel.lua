-- One cancel (ops.lua cancel_op: keys, arguments and replies are described there).
local r = cancel_op(KEYS, ARGV)
hflush()
return r
