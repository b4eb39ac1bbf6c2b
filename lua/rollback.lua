-- rollback.lua: undo one deduction whose publish definitely failed.
--
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders, KEYS[4] reserved, KEYS[5] meta,
-- KEYS[6] trace
-- ARGV[1] order id, ARGV[2] user id, ARGV[3] reason
--
-- Returns 1 when the unit was restored, 0 when the order was no longer
-- QUEUED (already settled by someone else): nothing is restored twice.
local value = redis.call('HGET', KEYS[3], ARGV[1])
if not value or string.sub(value, 1, 7) ~= 'QUEUED|' then
  return 0
end
local accepted = string.match(value, '([^|]*)$')
redis.call('INCR', KEYS[1])
if redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
redis.call('HSET', KEYS[3], ARGV[1], 'FAILED|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. accepted)
redis.call('HINCRBY', KEYS[5], 'queued', -1)
redis.call('HINCRBY', KEYS[5], 'failed', 1)
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
return 1
