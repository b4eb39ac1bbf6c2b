-- release_take.lua: take a customer's units in a release (an activity whose
-- sizes are sold as one, "one pair per customer") before their order is
-- deducted in the size's own sale: the first half of an order in a
-- release, in the release's own slot ({release:A}), apart from every
-- size's.
--
-- KEYS[1] meta     hash  'limit': units one customer may hold across the
--                        release's sizes (none: no release declared)
-- KEYS[2] held     hash  user id -> units the user's takes hold
-- KEYS[3] takes    hash  take id ("sku:nonce", the order-to-be's nonce) ->
--                        "user|quantity|state|order id|at_ms", state P
--                        (pending: its order not yet known to be made) or K
--                        (kept: its order made, the order id after it)
-- KEYS[4] pending  zset  take ids scored by when the sweep may give a
--                        pending one back (its order can no longer be made)
-- ARGV[1] take id, ARGV[2] user id, ARGV[3] quantity, ARGV[4] how long a
--         pending take stays before the sweep gives it back (ms)
--
-- Returns {1, held, limit} TAKEN (held: the user's units with this take),
-- {0} NO_RELEASE (nothing taken: the activity declares no release),
-- {-9, held, limit} LIMIT_REACHED (nothing taken).
--
-- Invariant: a user's held is the sum of their takes' quantities, and a
-- take is made only while held plus its quantity is within the limit; asked
-- again with the same take id (an answer not heard), the take stands once.
local PENDING = 'P'
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if not limit then
  return { 0 }
end
local user, quantity = ARGV[2], tonumber(ARGV[3])
local held = tonumber(redis.call('HGET', KEYS[2], user) or '0')
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return { 1, held, limit }
end
if held + quantity > limit then
  return { -9, held, limit }
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('HINCRBY', KEYS[2], user, quantity)
redis.call('HSET', KEYS[3], ARGV[1], user .. '|' .. quantity .. '|' .. PENDING .. '||' .. now)
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), ARGV[1])
return { 1, held + quantity, limit }
