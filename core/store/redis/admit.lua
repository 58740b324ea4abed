-- One admission (ops.lua admit_op: keys, arguments and replies are described there).
local r = admit_op(KEYS, ARGV)
if r == ALREADY then return redis.error_reply('ERR request already admitted') end
hflush()
return r
