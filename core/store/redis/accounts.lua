-- The accounts (accounts.ts): records of users and keys, their version and change log, the audit
-- stream; and wallet credits with their Idempotency-Keys. Every record write is one call: the
-- compare-and-set on its revision, the digest index of keys, the version, the change log, the
-- audit entry, and the notice to every instance.
--
-- ARGV[1] op, ARGV[2] now ('0' = TIME); the rest per op below. A write (write, credit) also takes
-- a deadline in Redis time (its last argument; '0' = none): run later than that — Redis was frozen
-- while the call waited, and its caller has given up and answered 503 — it changes nothing and
-- answers {-2}.
--
-- write  KEYS: records hash (users or keys), digests hash, version, change log, audit stream
--        ARGV[3] kind (u|k) [4] name [5] expected revision [6] record JSON ('' = delete)
--        [7] digest (keys) [8] audit JSON without id and at [9] audit retention ms [10] channel [11] deadline
--        → {1, rev, version, audit id, now} | {0, 'conflict' | 'digest_taken'}
-- load   KEYS: users hash, keys hash, version  → {version, users (name, stored)…, keys (name, stored)…}
-- changes KEYS: users hash, keys hash, version, change log  ARGV[3] since
--        → {version, [kind:name, stored or false]…} | {-1} when `since` is ahead of the store (it lost data)
-- credit KEYS: wallet hash, idempotency key, credits stream, ledger stream
--        ARGV[3] amount [4] base credit [5] the record's JSON fields without id, at, credit, spent
--        (a fragment starting with a comma) [6] fingerprint ('' = no key) [7] key TTL ms [8] deadline
--        [9] the ledger record packed but its id (pack.ts creditLedgerText): with its id
--        `credit:<credit id>` appended it goes to the ledger stream with the time, as a
--        settlement's does (ops.lua settle_op)
--        → {1, id, at, credit, spent} | {2, stored record text} (replay) | {3} (other fingerprint) | {4} (below zero)
-- audit  KEYS: audit stream  ARGV[3] audit JSON without id and at  [4] retention ms  → {id, now}
--
-- A stored record is `<rev>\n<json>`.

local op = ARGV[1]
local now = now_ms(ARGV[2])

local function expired(deadline)
  if deadline == '0' then return false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(deadline)
end

local function rev_of(stored)
  if not stored then return 0 end
  return tonumber(string.match(stored, '^(%d+)\n'))
end

-- The audit entry's JSON with its id and time put in front (the caller's fields follow).
local function add_audit(k, fields, retention)
  local at = '{"at":' .. I(now)
  local id = redis.call('XADD', k, 'MINID', '~', I(math.max(0, now - retention)), '*', 'e', at .. ',' .. string.sub(fields, 2))
  return id
end

if op == 'write' then
  if expired(ARGV[11]) then return { -2 } end
  local kind, name, expect, value, digest = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6], ARGV[7]
  local cur = redis.call('HGET', KEYS[1], name)
  local rev = rev_of(cur)
  if rev ~= expect then return { 0, 'conflict' } end
  if kind == 'k' and value ~= '' then
    local owner = redis.call('HGET', KEYS[2], digest)
    if owner and owner ~= name then return { 0, 'digest_taken' } end
  end
  if kind == 'k' and cur then
    local old = cjson.decode(string.sub(cur, string.len(I(rev)) + 2))
    if old.digest and old.digest ~= digest then redis.call('HDEL', KEYS[2], old.digest) end
  end
  local version = redis.call('INCR', KEYS[3])
  local new_rev = 0
  if value == '' then
    redis.call('HDEL', KEYS[1], name)
    if kind == 'k' then redis.call('HDEL', KEYS[2], digest) end
  else
    new_rev = rev + 1
    redis.call('HSET', KEYS[1], name, I(new_rev) .. '\n' .. value)
    if kind == 'k' then redis.call('HSET', KEYS[2], digest, name) end
  end
  redis.call('ZADD', KEYS[4], version, kind .. ':' .. name)
  local id = add_audit(KEYS[5], ARGV[8], tonumber(ARGV[9]))
  redis.call('PUBLISH', ARGV[10], version)
  return { 1, new_rev, version, id, now }
elseif op == 'load' then
  return { tonumber(redis.call('GET', KEYS[3]) or '0'), redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]) }
elseif op == 'changes' then
  local version = tonumber(redis.call('GET', KEYS[3]) or '0')
  local since = tonumber(ARGV[3])
  if since > version then return { -1 } end
  local changed = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. ARGV[3], '+inf')
  local out = { version }
  for _, id in ipairs(changed) do
    local hash = string.sub(id, 1, 1) == 'u' and KEYS[1] or KEYS[2]
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', hash, string.sub(id, 3)) or false
  end
  return out
elseif op == 'credit' then
  if expired(ARGV[8]) then return { -2 } end
  local amount, base, fields, fp = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
  if fp ~= '' then
    local got = redis.call('GET', KEYS[2])
    if got then
      local nl = string.find(got, '\n', 1, true)
      if string.sub(got, 1, nl - 1) == fp then return { 2, string.sub(got, nl + 1) } end
      return { 3 }
    end
  end
  local credit = tonumber(redis.call('HGET', KEYS[1], 'credit') or '0')
  local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
  if amount < 0 and base + credit + amount - spent < 0 then return { 4 } end
  credit = credit + amount
  redis.call('HSET', KEYS[1], 'credit', I(credit))
  local head = '{"at":' .. I(now) .. ',"credit":' .. I(credit) .. ',"spent":' .. I(spent)
  local id = redis.call('XADD', KEYS[3], '*', 'r', head .. fields .. '}')
  redis.call('XADD', KEYS[4], '*', 't', I(now), LF, ARGV[9] .. 'credit:' .. id)
  if fp ~= '' then
    redis.call('SET', KEYS[2], fp .. '\n' .. id .. '\n' .. head .. fields .. '}', 'PX', ARGV[7])
  end
  return { 1, id, now, credit, spent }
elseif op == 'audit' then
  local id = add_audit(KEYS[1], ARGV[3], tonumber(ARGV[4]))
  return { id, now }
end
return redis.error_reply('ERR unknown op ' .. tostring(op))
