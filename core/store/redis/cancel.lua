-- Cancel: drops an admission's reservation without a charge and frees its concurrency slot; with
-- undo 1 its RPM and free-call counts too (when still in their minute), with undo 2 also the key
-- windows it started (see lib.lua). Leaves a marker, so an admission that reaches Redis after its
-- cancel (a timed-out call) is refused instead of holding a reservation nobody releases.
--
-- KEYS[1] admission record   KEYS[2] done marker   KEYS[3] instance index (KEYS[1] when none)
-- ARGV[1] undo 0 | 1 | 2   ARGV[2] request id (index field)
-- Returns 1 when a record was released, 0 otherwise.

local released = release_record(KEYS[1], tonumber(ARGV[1]), nil)
hflush()
redis.call('SET', KEYS[2], 'c', 'NX', 'PX', DONE_TTL)
if KEYS[3] ~= KEYS[1] then redis.call('HDEL', KEYS[3], ARGV[2]) end
return released and 1 or 0
