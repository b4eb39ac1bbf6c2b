-- release_keep.lua: a release's take is kept: its order was made (the
-- second half of an order in a release), before the order's record is
-- published. The edge keeps its own takes; the reservation sweeper keeps
-- the take of an order it is about to publish again (the edge died between
-- the deduction and the keep).
--
-- KEYS[1] takes, KEYS[2] pending (lua/release_take.lua says what they hold)
-- ARGV[1] take id, ARGV[2] the order id
--
-- Returns 1 KEPT (now, or by an earlier call for the same order), -1 GONE:
-- no such take (the sweep gave it back, its order never to be made, or it
-- was given back since): the order must not be published, it is rolled
-- back.
--
-- Invariant: the take and the sweep decide in this one slot, whichever
-- comes first: a kept take is never swept, a swept one never kept.
local KEPT = 'K'
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return -1
end
local user, quantity, stage, order, at = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
if stage == KEPT then
  if order == ARGV[2] then
    return 1
  end
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], user .. '|' .. quantity .. '|' .. KEPT .. '|' .. ARGV[2] .. '|' .. at)
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
