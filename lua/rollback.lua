-- rollback.lua: undo one deduction whose publish definitely failed.
--
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders, KEYS[4] reserved, KEYS[5] meta,
-- KEYS[6] trace, KEYS[7] held (users' places)
-- ARGV[1] order id, ARGV[2] user id, ARGV[3] reason, ARGV[4] the publish
-- deadline the order was accepted with (ms), ARGV[5] its quantity, ARGV[6]
-- its slot (the user's place)
--
-- Returns 1 when the units were restored, 0 when the order was no longer
-- QUEUED (already settled by someone else: nothing is restored twice) or
-- its publish deadline has passed.
--
-- Invariant: an order is undone only before its publish deadline, on
-- Redis's clock. After it the reservation is the sweeper's, which may have
-- published its record again: a unit given back then could also be written
-- CREATED. (The deadline is the one it was accepted with, not the
-- reservation's score: the sweeper moves that after a publish.)
local value = redis.call('HGET', KEYS[3], ARGV[1])
if not value or string.sub(value, 1, 7) ~= 'QUEUED|' then
  return 0
end
local accepted = string.match(value, '([^|]*)$')
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now >= tonumber(accepted) + tonumber(ARGV[4]) then
  return 0
end
redis.call('INCRBY', KEYS[1], ARGV[5])
if redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
local place = ARGV[2] .. '/' .. ARGV[6]
if redis.call('HGET', KEYS[7], place) == ARGV[1] .. '|' .. ARGV[5] then
  redis.call('HDEL', KEYS[7], place)
end
redis.call('HSET', KEYS[3], ARGV[1], 'FAILED|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. accepted)
redis.call('HINCRBY', KEYS[5], 'queued', -1)
if tonumber(ARGV[5]) > 1 then
  redis.call('HINCRBY', KEYS[5], 'queued_extra', 1 - tonumber(ARGV[5]))
end
redis.call('HINCRBY', KEYS[5], 'failed', 1)
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
return 1
