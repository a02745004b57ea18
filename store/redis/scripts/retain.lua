-- Tombstones and twin entries (see store/tombstone.go). KEYS[5] is the
-- record's tombstone, "<completed at ms>:<status>:<reason>", a small
-- string that outlives the record; a twin entry (KEYS[6] on a single
-- node) is "<completed at ms>:<record id>". Both expire by themselves.
local function bury(ca, sc, rsn, pxat)
  redis.call('SET', KEYS[5], ca .. ':' .. sc .. ':' .. rsn, 'PXAT', string.format('%d', pxat))
end
