-- notice publishes the record id on the store's notice channel
-- (ARGV[#ARGV - 1]): the record left the in-flight state, and requests
-- waiting for it on any gateway read it now. A regular PUBLISH: in a
-- Cluster it reaches every node's subscribers, so one subscription per
-- gateway hears all. Only when somebody may wait for it: a duplicate
-- found the record in flight and marked it (the format byte 'w' of cur,
-- the record as the script found it; see claim.lua), or waiters of the
-- calling gateway need notices now (the last ARGV is '1').
local function notice(cur)
  if ARGV[#ARGV] == '1' or (cur and string.sub(cur, 1, 1) == 'w') then
    redis.call('PUBLISH', ARGV[#ARGV - 1], ARGV[1])
  end
end
