
local id = ARGV[1]
local idx = {in_flight = KEYS[2], completed = KEYS[3], unknown = KEYS[4], released = KEYS[5]}
local function settle(old, new, ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  if old and old ~= new and idx[old] then
    redis.call('ZREM', idx[old], id)
  end
  redis.call('ZADD', idx[new], now + ttl, id)
  -- The completed index takes every result: it is trimmed by one write in
  -- 16 (ids are uniform hex; listing skips expired entries by score).
  if new ~= 'completed' or string.byte(id, -1) % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', idx[new], '-inf', now)
  end
end
