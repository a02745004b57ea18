-- notice publishes the record id on the store's notice channel (the last
-- ARGV): the record left the in-flight state, and requests waiting for it
-- on any gateway read it now. A regular PUBLISH: in a Cluster it reaches
-- every node's subscribers, so one subscription per gateway hears all.
local function notice()
  redis.call('PUBLISH', ARGV[#ARGV], ARGV[1])
end
