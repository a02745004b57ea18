
local r = redis.call('HMGET', KEYS[1], $fields)
table.insert(r, 1, code)
return r
