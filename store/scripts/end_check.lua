
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'st', 'tok', 'clt', 'chs', 'chf', 'chl')
local code = $codeCheckRefused
if cur[1] == 'unknown' and cur[2] == ARGV[2] and cur[3] == ARGV[3] then
  code = $codeCheckHeld
  local line = string.format('%d', now) .. ' ' .. ARGV[4] .. ' ' .. ARGV[5]
  local log = cur[6]
  if log and log ~= '' then log = log .. '\n' .. line else log = line end
  local _, n = string.gsub(log, '\n', '')
  while n >= $MaxCheckEntries do
    log = string.sub(log, string.find(log, '\n', 1, true) + 1)
    n = n - 1
  end
  redis.call('HSET', key, 'chl', log)
  redis.call('HINCRBY', key, 'chc', 1)
  redis.call('HDEL', key, 'clt', 'clu')
  if ARGV[15] ~= '' then audit(ARGV[15]) end
  local verdict = ARGV[5]
  local ttl = tonumber(ARGV[9])
  local streak = tonumber(cur[4] or '0')
  if verdict == 'not_applied' then
    local last = tonumber(cur[5] or '0')
    if last == 0 or now - last >= tonumber(ARGV[7]) then
      streak = streak + 1
      redis.call('HSET', key, 'chs', streak, 'chf', now)
    end
  end
  if verdict == 'applied' then
    redis.call('HDEL', key, 'chn')
    redis.call('HSET', key, 'st', 'completed', 'tok', ARGV[3], 'ca', now, 'sc', ARGV[10],
      'hd', ARGV[11], 'bd', ARGV[12], 'bo', '0', 'dg', ARGV[13], 'eid', ARGV[14], 'rsn', '$ReasonVerified')
    settle('unknown', 'completed', ttl)
    code = $codeCheckApplied
  elseif verdict == 'not_applied' and streak >= tonumber(ARGV[6]) then
    redis.call('HDEL', key, $resultFields, 'chn')
    redis.call('HSET', key, 'st', 'released', 'tok', ARGV[3], 'rsn', '$ReasonVerifiedNotApplied')
    settle('unknown', 'released', ttl)
    code = $codeCheckReleased
  elseif tonumber(ARGV[8]) > 0 then
    redis.call('HSET', key, 'chn', now + tonumber(ARGV[8]))
  else
    redis.call('HDEL', key, 'chn')
  end
end
