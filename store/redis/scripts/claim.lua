local key, id, tok = KEYS[1], ARGV[1], ARGV[2]
local notAfter = tonumber(ARGV[4])
-- The record, and with it the id's tombstone (KEYS[5], in the record's
-- slot) when the route keeps them (ARGV[9] after expiry; "": look for
-- none): one read.
local old, tombFound
if ARGV[9] and ARGV[9] ~= '' then
  local v = redis.call('MGET', key, KEYS[5])
  old, tombFound = v[1], v[2]
else
  old = redis.call('GET', key)
end
-- Only a step that may hand out or move a claim needs the clock, and only
-- such a step is refused when the caller has given up (a stalled Redis
-- ran it late): a completed or held record is answered as it is.
local function late()
  return clock() > notAfter and notAfter > 0
end
if not old then
  if late() then return {$codeLate, now} end
  -- What the id and the payload left behind: the id's tombstone
  -- (read above) and the twin entry of the payload's digest (KEYS[6] on
  -- a single node, else read by the caller into ARGV[11]); one naming
  -- this id is no twin. ARGV[10] on twin.
  local tomb = tombFound or ''
  local twin = ARGV[11] or ''
  if KEYS[6] then twin = redis.call('GET', KEYS[6]) or '' end
  if twin ~= '' and string.sub(twin, string.find(twin, ':', 1, true) + 1) == id then twin = '' end
  if (tomb ~= '' and ARGV[9] == 'reject') or (twin ~= '' and ARGV[10] == 'reject') then
    return {$codeRejected, now, tomb, twin}
  end
  -- The record the caller built, stamped with the Redis clock: expiry,
  -- started at, lease until (fixed-width, in that order at 23..61).
  local hold = tonumber(ARGV[5])
  if twin ~= '' and ARGV[10] == 'hold' then
    -- held as the caller built it (ARGV[12]): no lease
    local blob = string.sub(ARGV[12], 1, 22) .. string.format('%013d%013d%013d', now + hold, now, 0)
      .. string.sub(ARGV[12], 62)
    redis.call('SET', key, blob, 'PX', hold)
    settle(nil, 'u', now + hold)
    return {$codeHeld, now, blob, 1, tomb, twin}
  end
  local blob = ARGV[3]
  blob = string.sub(blob, 1, 22) .. string.format('%013d%013d%013d', now + hold, now, now + tonumber(ARGV[7]))
    .. string.sub(blob, 62)
  redis.call('SET', key, blob, 'PX', hold)
  redis.call('ZADD', KEYS[2], now + hold, id)
  return {$codeCreated, now, tomb, twin}
end
-- A completed or held record: the attempt is counted in place, best
-- effort: a master that refuses writes (min-replicas-to-write without its
-- replicas, maxmemory) still answers a replay or a conflict; the attempt
-- then goes uncounted.
local st = string.sub(old, 2, 2)
local att = tonumber(string.sub(old, 3, 12)) + 1
local function count()
  local r = redis.pcall('SETRANGE', key, 2, string.format('%010d', att))
  if type(r) == 'table' and r.err then att = att - 1 end
end
if st == 'c' or st == 'u' then
  count()
  return {$codeExisting, 0, old, att}
end
if late() then return {$codeLate, now} end
local r = decode(old)
if st == 'f' and r.tok == tok then
  return {$codeOwned, now, old, att - 1}
end
local new = decode(ARGV[3])
local hold = tonumber(ARGV[5])
local expired = st == 'f' and r.lu <= now
local same = r.fp == new.fp and r.fpr == new.fpr
-- A record released because the upstream refused its request as sent
-- is free (store.Free): any payload takes it over.
local free = st == 'r' and r.rsn == '$ReasonRefused' and (tonumber(r.ndu) or 0) == 0
r.att = att
if expired and ARGV[6] ~= 'release' then
  r.st, r.rsn, r.exp = 'u', 'lease_expired', now + hold
  if r.cha ~= '' then r.chn = now + tonumber(r.cha) end
  local s = save(r)
  settle(st, 'u', r.exp)
  return {$codeExisting, now, s, att}
elseif (same and (expired or st == 'r')) or free then
  if expired then
    -- an unknown outcome that the release policy lets go: it counts
    -- against the budget (ARGV[8], 0: none)
    r.ndc, r.ndu = (tonumber(r.ndc) or 0) + 1, (tonumber(r.ndu) or 0) + 1
    local max = tonumber(ARGV[8]) or 0
    if max > 0 and r.ndc >= max then
      r.st, r.rsn, r.chn, r.exp = 'u', '$ReasonRetriesExhausted', '', now + hold
      local s = save(r)
      settle(st, 'u', r.exp)
      return {$codeExisting, now, s, att}
    end
  end
  clearResult(r)
  for _, f in ipairs({'chc', 'chn', 'chs', 'chf', 'clt', 'clu'}) do r[f] = '' end
  r.st, r.tok, r.route, r.sa, r.lu = 'f', tok, new.route, now, now + tonumber(ARGV[7])
  r.chk, r.cha, r.exe, r.exp = new.chk, new.cha, r.exe + 1, now + hold
  r.req, r.fp, r.fpr = new.req, new.fp, new.fpr
  r.call = new.call
  local s = save(r)
  settle(st, 'f', r.exp)
  return {$codeTakeOver, now, s, att}
end
-- A live claim or a record of another payload: only the attempt changes.
-- A live claim found by another request is marked as well (the format
-- byte 'w', with the attempt in the same SETRANGE): a duplicate may wait
-- for it, so its end sends a notice (notice.lua).
if st == 'f' then
  local w = redis.pcall('SETRANGE', key, 0, 'wf' .. string.format('%010d', att))
  if type(w) == 'table' and w.err then att = att - 1 end
else
  count()
end
return {$codeExisting, now, old, att}
