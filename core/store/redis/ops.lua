-- The operations on an admission, shared by admit.lua, settle.lua, cancel.lua and batch.lua (which
-- runs several of them in one call: the requests of one event-loop turn). Each takes its keys and
-- arguments as tables (K, A: what KEYS and ARGV are to the single scripts) and leaves its counter
-- changes in the hash cache (lib.lua): the caller writes them with one hflush() at the end, so
-- the operations of a batch read one another's changes and every hash is written once.

-- Returned by admit_op instead of an error, so that one refused operation never fails a batch.
local ALREADY = -1

-- Admission: checks every claim, then applies them all (reservations, RPM counts, window starts)
-- or nothing; then, when asked, takes the request's concurrency slot (checked last). One call per
-- admission on a single Redis; one per hash slot (part) on a cluster.
--
-- K[1] admission record   K[2] done markers' hash   K[3] instance index (K[1] when none)
-- A[1] now ('0' = TIME)   A[2] reserve   A[3] request id (index field)
-- A[4] index entry ('' = none)
-- A[5..8] the concurrency slot: tag ('' = none), lease id, limit, queue size
-- A[9] the claims, LIST-separated; each SEP-separated: global index, kind, hash tag, parameters
--   b balance (u:<user>; the config file's credit, free 0/1, freeRpm; the stored credit is the wallet's)   p plan (u:<user>; group, daily, weekly, monthly)
--   q key quota (k:<key>; limit)   w key window (k:<key>; name, limit, duration)
--   c spend cap (u:<user>; w|m, limit)   r rpm (u:, g: or a: tag; limit)
-- Returns {1} admitted ({1, s} with a slot: s = 1 granted, 0 queued, 2 queue full),
-- {0, failIndex, retryAfterMs, -1} refused outright (the first such claim),
-- {0, -1, -1, heldIndex} refused only by reservations in flight; -1 = none; ALREADY when the
-- request id was admitted (or cancelled) before.
-- Every field of a plan's usage hash (day, week and month starts and usage, reserved).
local function want_plan(k)
  hwant2(k, 'ds', 'du')
  hwant2(k, 'ws', 'wu')
  hwant2(k, 'ms', 'mu')
  hwant1(k, 'res')
end

-- Claims as admit_op reads them: per claim its index, kind, hash key(s), field names and numbers.
-- The requests of one key send the same text: a batch parses it once.
local CLAIMS = {}
local function parse_claims(text)
  local parsed = CLAIMS[text]
  if parsed then return parsed end
  parsed = {}
  local holds = {}
  for _, item in ipairs(split(text, LIST)) do
    local f = split(item, SEP)
    local kind, tag, a = f[2], f[3], f[4]
    local c = { idx = tonumber(f[1]), kind = kind, a = a, k1 = false, k2 = false, fs = false, fu = false, fr = false, n1 = 0, n2 = 0, free = false, limits = false }
    if kind == 'r' then
      c.k1, c.n1 = key(tag, 'rpm'), tonumber(a)
    elseif kind == 'w' then
      c.k1, c.fs, c.fu, c.fr = key(tag, 'counters'), a .. ':s', a .. ':u', a .. ':r'
      c.n1, c.n2 = tonumber(f[5]), tonumber(f[6])
    elseif kind == 'q' then
      c.k1, c.n1 = key(tag, 'counters'), tonumber(a)
    elseif kind == 'c' then
      c.k1, c.fs, c.fu, c.fr = key(tag, 'caps'), a .. 's', a .. 'u', a .. 'r'
      c.n1 = tonumber(f[5])
    elseif kind == 'b' then
      c.k1, c.k2 = key(tag, 'wallet'), key(tag, 'free')
      c.n1, c.free, c.n2 = tonumber(a), f[5] == '1', tonumber(f[6])
    elseif kind == 'p' then
      c.k1 = key(tag, 'plan:' .. a)
      c.limits = { tonumber(f[5]), tonumber(f[6]), tonumber(f[7]) }
    else
      return nil
    end
    parsed[#parsed + 1] = c
    -- What an admitted request holds the reserve on: every claim but RPM.
    if kind == 'w' or kind == 'c' then
      holds[#holds + 1] = c.k1
      holds[#holds + 1] = c.fr
    elseif kind ~= 'r' then
      holds[#holds + 1] = c.k1
      holds[#holds + 1] = 'res'
    end
  end
  parsed.holds, parsed.held = holds, table.concat(holds, '\n')
  CLAIMS[text] = parsed
  return parsed
end

-- Done markers: a field of the hash K[2] (keys.ts `done`, named by the request id's first
-- DONE_BUCKET characters), the field named by the rest of the id, its value the mode that ended
-- the request (s settled, r recovered, x corrected after a recovery, c cancelled). The hash lives
-- DONE_TTL past its last marker, so every marker at least that long; its expiry is set once per
-- hash and script call.
local DONE_SET = {}
local function done_field(id)
  return string.sub(id, DONE_BUCKET + 1)
end
local function done_get(k, id)
  return redis.call('HGET', k, done_field(id))
end
local function done_mark(k, id, mode, only_new)
  if only_new then redis.call('HSETNX', k, done_field(id), mode)
  else redis.call('HSET', k, done_field(id), mode) end
  if not DONE_SET[k] then
    redis.call('PEXPIRE', k, DONE_TTL)
    DONE_SET[k] = true
  end
end

-- Reused by every admission of a call (admit_op reads only the entries it wrote), and the minute
-- as text, for the records.
local ACTS, MINUTE_TEXT = {}, {}

local function admit_op(K, A)
  local now = now_ms(A[1])
  if redis.call('EXISTS', K[1]) > 0 or redis.call('HEXISTS', K[2], done_field(A[3])) == 1 then return ALREADY end
  local reserve = tonumber(A[2])
  local minute = math.floor(now / MINUTE)
  local until_next = (minute + 1) * MINUTE - now

  -- Declare every field the checks read.
  local claims = parse_claims(A[9])
  if not claims then return redis.error_reply('ERR unknown claim kind') end
  local n = #claims
  -- Once per call and claims text: the fields stay known (in the hash cache) for the whole call.
  for i = 1, claims.wanted and 0 or n do
    local c = claims[i]
    local kind, k1 = c.kind, c.k1
    if kind == 'r' then
      hwant2(k1, 'm', 'c')
    elseif kind == 'w' or kind == 'c' then
      hwant2(k1, c.fs, c.fu)
      hwant1(k1, c.fr)
    elseif kind == 'q' then
      hwant2(k1, 'used', 'res')
    elseif kind == 'b' then
      hwant(k1, 'spent', 'res', 'credit')
    else -- p
      want_plan(k1)
    end
  end
  claims.wanted = true
  hload()

  -- The checks; what an admission would apply besides its holds (ACTS, in threes): count (k),
  -- wstart (k, window).
  local acts, na = ACTS, 0
  local held_at = -1

  for i = 1, n do
    local cl = claims[i]
    local kind, k1 = cl.kind, cl.k1
    local fail, retry, held = false, -1, false

    if kind == 'r' then
      local used = (hnum(k1, 'm') == minute) and hnum(k1, 'c') or 0
      local limit = cl.n1
      if limit > 0 and used >= limit then
        fail = true; retry = until_next
      else acts[na + 1], acts[na + 2], na = 'count', k1, na + 3 end
    elseif kind == 'w' then
      local limit, dur = cl.n1, cl.n2
      local start = hnum_or_nil(k1, cl.fs)
      local restart = start == nil or now >= start + dur
      local used = restart and 0 or hnum(k1, cl.fu)
      local res = hnum(k1, cl.fr)
      if limit > 0 and used >= limit then fail = true
      elseif limit > 0 and used + res >= limit then held = true
      else
        if restart then acts[na + 1], acts[na + 2], acts[na + 3], na = 'wstart', k1, cl.a, na + 3 end
      end
    elseif kind == 'q' then
      local limit, used, res = cl.n1, hnum(k1, 'used'), hnum(k1, 'res')
      if limit > 0 and used >= limit then fail = true
      elseif limit > 0 and used + res >= limit then held = true end
    elseif kind == 'c' then
      local limit = cl.n1
      local weekly = cl.a == 'w'
      local start = weekly and week_start(now) or month_start(now)
      local used = (hnum(k1, cl.fs) == start) and hnum(k1, cl.fu) or 0
      local res = hnum(k1, cl.fr)
      if limit > 0 and used < limit and used + res >= limit then held = true
      elseif limit > 0 and used >= limit then
        fail = true
        retry = (weekly and (start + 7 * DAY) or next_month_start(now)) - now
      end
    elseif kind == 'b' then
      -- The claim's credit (the config file's) plus what top-ups stored (accounts.lua).
      local credit, spent, res = cl.n1 + hnum(k1, 'credit'), hnum(k1, 'spent'), hnum(k1, 'res')
      if credit - spent - res > 0 then
        -- held (claims.holds)
      elseif not cl.free then
        if credit - spent > 0 then held = true else fail = true end
      else
        local k2 = cl.k2
        local used = (hnum(k2, 'm') == minute) and hnum(k2, 'c') or 0
        local free_rpm = cl.n2
        if free_rpm > 0 and used >= free_rpm then
          fail = true; retry = until_next
        else
          acts[na + 1], acts[na + 2], na = 'count', k2, na + 3
        end
      end
    elseif kind == 'p' then
      local res = hnum(k1, 'res')
      local limits = cl.limits
      local fields = { 'ds', 'du', 'ws', 'wu', 'ms', 'mu' }
      for j = 1, 3 do
        local limit = limits[j]
        if limit > 0 and not fail then
          local start = (j == 1 and day_start(now)) or (j == 2 and week_start(now)) or month_start(now)
          local used = (hnum(k1, fields[2 * j - 1]) == start) and hnum(k1, fields[2 * j]) or 0
          if used >= limit then fail = true
          elseif used + res >= limit then held = true end
        end
      end
      if fail then held = false end
    end

    -- A held claim is reported only if no later claim is refused outright: exhaustion wins.
    if fail then return { 0, cl.idx, retry, -1 } end
    if held and held_at < 0 then held_at = cl.idx end
  end
  if held_at >= 0 then return { 0, -1, -1, held_at } end

  -- Apply, and note in the record what to undo: holds (every claim but RPM holds the reserve:
  -- claims.holds), counts (k, minute), window starts.
  if reserve > 0 then
    local p = hpairs(claims.holds)
    for i = 1, #p - 2, 3 do
      local v, f = p[i], p[i + 1]
      local x = v[f]
      if type(x) == 'number' then v[f] = x + reserve else hadd(p[i + 2], f, reserve) end
    end
  end
  local counted, started = {}, {}
  local fresh
  local m = MINUTE_TEXT[minute]
  if not m then
    m = I(minute)
    MINUTE_TEXT[minute] = m
  end
  for j = 1, na, 3 do
    local kind, k, f = acts[j], acts[j + 1], acts[j + 2]
    if kind == 'count' then
      if hnum(k, 'm') ~= minute then
        hput(k, 'm', minute)
        hput(k, 'c', 1)
        -- Kept one minute past its own, then gone (set once per minute: the same instant each time).
        fresh = fresh or {}
        fresh[#fresh + 1] = k
      else
        hadd(k, 'c', 1)
      end
      counted[#counted + 1] = k; counted[#counted + 1] = m
    else -- wstart
      hput(k, f .. ':s', now)
      hput(k, f .. ':u', 0)
      started[#started + 1] = k; started[#started + 1] = f; started[#started + 1] = I(now)
    end
  end
  if fresh then
    for _, k in ipairs(fresh) do hexpire(k, until_next + MINUTE) end
  end

  local reply = { 1 }
  local record = A[2] .. LIST .. claims.held .. LIST .. table.concat(counted, '\n') .. LIST .. table.concat(started, '\n')
  if A[5] ~= '' then
    local base = key(A[5], 'slot:')
    local got = slot_acquire(base, A[6], tonumber(A[7]), tonumber(A[8]), (A[1] == '0') and now or now_ms('0'))
    -- Held or queued, the slot goes with the record: its settlement or cancel frees it (lib.lua).
    if got ~= 2 then record = record .. LIST .. base .. LIST .. A[6] end
    reply[2] = got
  end
  redis.call('SET', K[1], record, 'PX', RECORD_TTL)
  if A[4] ~= '' then
    redis.call('HSET', K[3], A[3], A[4])
    hexpire(K[3], RECORD_TTL)
  end
  return reply
end

-- Settlement: replaces the admission's reservation with the actual charge, once per request id
-- (the done marker), records the usage, and frees the admission's concurrency slot. Also crash
-- recovery (mode 'r'): applies the recovery settlement of an admission whose instance died, only
-- while its record still exists.
--
-- K[1] admission record   K[2] done markers' hash   K[3] instance index (K[1] when none)
-- K[4] instance registry (recovery on a single Redis; else K[1])
-- K[5] the ledger stream (K[1] when this part writes no record)
-- A[1] now ('0' = TIME)   A[2] mode: s settle | r recover   A[3] request id (index field)
-- A[4] the instance that admitted it   A[5] effects: key 0/1, user 0/1 (on a cluster a part
-- applies only those in its own hash slot)   A[6] key tag   A[7] user tag
-- A[8] the settlement, SEP-separated (pack.ts packSettlement): key, user, group, model,
--   billing (balance | plan), actual, cost, input, output, cache read, cache write tokens,
--   duration ms, key windows "5h,1d", estimated 0/1
-- A[9] the settlement's ledger record, packed (pack.ts ledgerText): added to the stream K[5] with
--   the time when the settlement applies (ledger_add), so a record exists exactly when the
--   counters moved ('' = none: a cluster part other than the key's)
-- Returns 1 applied, 0 already settled, 2 already resolved by crash recovery, 3 nothing to recover,
-- 4 not recovered: the instance is alive after all (it renewed its lease since the reaper looked).
-- Mode 'x' (index.ts, after a 2): a correction on top of the recovery — A[8] holds what the real
-- settlement has above the recovered one; applied once, only after a recovery, counting no request.
local COUNTERS = { 'requests', 'input', 'output', 'cacheRead', 'cacheWrite', 'cost', 'actual', 'durationMs' }
-- What the settlements of a batch share, built once per script call: a model's day-record fields,
-- a key's and a user's hash names (and whether their fields were declared), the day, the ring's
-- fields for a second.
local DAYF, KEYN, DAYK, RINGF = {}, {}, {}, {}
local function day_fields(model)
  local f = DAYF[model]
  if not f then
    f = {}
    for i = 1, 8 do f[i] = model .. '|' .. COUNTERS[i] end
    DAYF[model] = f
  end
  return f
end
local function key_names(tag)
  local n = KEYN[tag]
  if not n then
    n = { key(tag, 'counters'), key(tag, 'totals'), key(tag, 'ring'), key(tag, 'day:') }
    KEYN[tag] = n
  end
  return n
end
local USERN = {}
local function user_names(tag)
  local n = USERN[tag]
  if not n then
    n = { key(tag, 'wallet'), key(tag, 'caps') }
    USERN[tag] = n
  end
  return n
end
local function day_key_cached(t)
  local d = math.floor(t / DAY)
  local k = DAYK[d]
  if not k then
    k = day_key(t)
    DAYK[d] = k
  end
  return k
end
local function ring_fields(sec)
  local f = RINGF[sec]
  if not f then
    local slot = tostring(sec % 60)
    f = { 's' .. slot, 'r' .. slot, 't' .. slot }
    RINGF[sec] = f
  end
  return f[1], f[2], f[3]
end

-- A key window's start and usage fields ("5h" → "5h:s", "5h:u").
local WINF = {}
local function window_fields(w)
  local f = WINF[w]
  if not f then
    f = { w .. ':s', w .. ':u' }
    WINF[w] = f
  end
  return f
end

-- Adds to a period's usage (fields sf: start, uf: used), starting it over in a new period.
local function roll_add(h, sf, uf, start, amount)
  if hnum(h, sf) ~= start then
    hput(h, sf, start)
    hput(h, uf, 0)
  end
  hadd(h, uf, amount)
end

-- A settlement's counters in COUNTERS order (refilled by each settlement of a call).
local VALUES = {}

-- The ledger records of this call (ledger.ts): one stream entry per stream and time, fields t
-- (the time) and LF (the packed records, one per line), added by ledger_flush at the end of the
-- call. A batch's settlements share one entry: one XADD, however many records.
local LEDGER = {}
local function ledger_add(stream, t, text)
  local last = LEDGER[#LEDGER]
  if last and last[1] == stream and last[2] == t then
    last[#last + 1] = text
  else
    LEDGER[#LEDGER + 1] = { stream, t, text }
  end
end
local function ledger_flush()
  for i = 1, #LEDGER do
    local e = LEDGER[i]
    redis.call('XADD', e[1], '*', 't', I(e[2]), LF, table.concat(e, '\n', 3))
  end
end

local function settle_op(K, A)
  local now = now_ms(A[1])
  local mode = A[2]
  local indexed = K[3] ~= K[1]

  if mode == 'r' then
    if redis.call('EXISTS', K[1]) == 0 then
      if indexed then redis.call('HDEL', K[3], A[3]) end
      return 3
    end
    if K[4] ~= K[1] and (tonumber(redis.call('ZSCORE', K[4], A[4])) or 0) > now_ms('0') then return 4 end
  elseif mode == 'x' then
    if done_get(K[2], A[3]) ~= 'r' then return 0 end
  else
    local done = done_get(K[2], A[3])
    if done == 's' or done == 'r' or done == 'x' then
      if indexed then redis.call('HDEL', K[3], A[3]) end
      return done == 's' and 0 or 2
    end
  end

  local s = split(A[8], SEP)
  local group, model, billing, actual = s[3], s[4], s[5], tonumber(s[6])
  local cost, input, output, cr, cw, dur = tonumber(s[7]), tonumber(s[8]), tonumber(s[9]), tonumber(s[10]), tonumber(s[11]), tonumber(s[12])
  local doKey, doUser = string.sub(A[5], 1, 1) == '1', string.sub(A[5], 2, 2) == '1'

  -- Every field this settlement reads, declared before the record's release touches the same hashes.
  local kc, totals, dayrec, ring, wallet, caps, plan, day
  local windows = split_cached(s[13], ',')
  local sec = math.floor(now / 1000)
  local fs, fr, ft = ring_fields(sec)
  local dayf = day_fields(model)
  if doKey then
    local kt = A[6]
    local kk = key_names(kt)
    kc, totals, ring = kk[1], kk[2], kk[3]
    day = day_key_cached(now)
    if kk.day ~= day then
      kk.day, kk.dayrec = day, kk[4] .. day
    end
    dayrec = kk.dayrec
    -- Declared once per call and window list: the fields stay known for the whole call.
    if kk.wanted ~= windows then
      hwant1(kc, 'used')
      for i = 1, #windows do
        local wf = window_fields(windows[i])
        hwant2(kc, wf[1], wf[2])
      end
      kk.wanted = windows
    end
    hwant_all(totals, COUNTERS)
    hwant_all(dayrec, dayf)
    hwant2(ring, fs, fr)
    hwant1(ring, ft)
  end
  if doUser then
    local u = A[7]
    if billing == 'balance' then
      local un = user_names(u)
      wallet, caps = un[1], un[2]
      if not un.wanted then
        hwant2(wallet, 'spent', 'res')
        hwant2(caps, 'ws', 'wu')
        hwant2(caps, 'ms', 'mu')
        un.wanted = true
      end
    else
      plan = key(u, 'plan:' .. group)
      want_plan(plan)
    end
  end
  release_record(K[1], 0, (A[1] == '0') and now or nil)
  done_mark(K[2], A[3], mode, false)
  if A[9] ~= '' then ledger_add(K[5], now, A[9]) end
  if indexed then redis.call('HDEL', K[3], A[3]) end
  hload()

  if doKey then
    hadd(kc, 'used', actual)
    for i = 1, #windows do
      local w = windows[i]
      local wf = window_fields(w)
      local start = hnum_or_nil(kc, wf[1])
      if start == nil or now >= start + WINDOW_MS[w] then
        hput(kc, wf[1], now)
        hput(kc, wf[2], 0)
      end
      hadd(kc, wf[2], actual)
    end

    local values = VALUES
    local one = mode == 'x' and 0 or 1
    values[1], values[2], values[3], values[4], values[5], values[6], values[7], values[8] = one, input, output, cr, cw, cost, actual, dur
    if hraw(dayrec, dayf[1]) == false then
      redis.call('ZADD', key(A[6], 'days'), 0, day)
    end
    hadd_all(totals, COUNTERS, values)
    hadd_all(dayrec, dayf, values)
    if s[14] == '1' then hadd(totals, 'estimatedRequests', 1) end
    if mode == 'r' then hadd(totals, 'recoveredRequests', 1) end

    if hnum(ring, fs) ~= sec then
      hput(ring, fs, sec)
      hput(ring, fr, 0)
      hput(ring, ft, 0)
      -- Only the last 60 s are read: the ring goes once nothing was recorded for two minutes.
      hexpire(ring, 2 * MINUTE)
    end
    hadd(ring, fr, one)
    hadd(ring, ft, input + output + cr + cw)
  end

  if doUser then
    if billing == 'balance' then
      hadd(wallet, 'spent', actual)
      roll_add(caps, 'ws', 'wu', week_start(now), actual)
      roll_add(caps, 'ms', 'mu', month_start(now), actual)
    else
      roll_add(plan, 'ds', 'du', day_start(now), actual)
      roll_add(plan, 'ws', 'wu', week_start(now), actual)
      roll_add(plan, 'ms', 'mu', month_start(now), actual)
    end
  end
  return 1
end

-- Cancel: drops an admission's reservation without a charge and frees its concurrency slot; with
-- undo 1 its RPM and free-call counts too (when still in their minute), with undo 2 also the key
-- windows it started (see lib.lua). Leaves a marker, so an admission that reaches Redis after its
-- cancel (a timed-out call) is refused instead of holding a reservation nobody releases.
--
-- K[1] admission record   K[2] done markers' hash   K[3] instance index (K[1] when none)
-- A[1] undo 0 | 1 | 2   A[2] request id (index field)
-- Returns 1 when a record was released, 0 otherwise.
local function cancel_op(K, A)
  local released = release_record(K[1], tonumber(A[1]), nil)
  done_mark(K[2], A[2], 'c', true)
  if K[3] ~= K[1] then redis.call('HDEL', K[3], A[2]) end
  return released and 1 or 0
end
