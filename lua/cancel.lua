-- cancel.lua: give the units of CANCELLED orders back to their sale, all of
-- an order's at once, at most once per order id, for one sale.
--
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders, KEYS[4] reserved,
-- KEYS[5] returned (set: order ids whose unit a cancellation gave back),
-- KEYS[6] meta (the status counters), KEYS[7] held (users' places)
-- ARGV: order id, user id, reason (EXPIRED or BUYER_CANCELLED), quantity,
--       slot, repeated for every order
--
-- Returns how many units went back now.
--
-- Invariant: PostgreSQL cancelled these orders first (its guarded update
-- has one winner); Redis follows once per order id: the unit goes back to
-- stock, the buyer mark is cleared (the user may buy again), the status and
-- counters move, and the user's place is freed. An order the hash does not hold (another round's, or one
-- Redis lost) or holds as FAILED gives nothing back: its unit is not this
-- round's to count, or was restored already.
--
-- A sale whose keys expired (meta gone) is left alone: nothing in Redis is
-- recreated, PostgreSQL's cancellation stands by itself.
if redis.call('EXISTS', KEYS[6]) == 0 then
  return 0
end
local returned = 0
for i = 1, #ARGV, 5 do
  local id, user, quantity, place = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 3]), ARGV[i + 1] .. '/' .. ARGV[i + 4]
  if redis.call('SISMEMBER', KEYS[5], id) == 0 then
    local value = redis.call('HGET', KEYS[3], id)
    local status = value and string.match(value, '^([^|]*)')
    if status == 'CREATED' or status == 'QUEUED' then
      local accepted = string.match(value, '([^|]*)$')
      redis.call('SADD', KEYS[5], id)
      redis.call('INCRBY', KEYS[1], quantity)
      if redis.call('HGET', KEYS[2], user) == id then
        redis.call('HDEL', KEYS[2], user)
      end
      if redis.call('HGET', KEYS[7], place) == id .. '|' .. quantity then
        redis.call('HDEL', KEYS[7], place)
      end
      redis.call('HSET', KEYS[3], id, 'CANCELLED|' .. user .. '|' .. ARGV[i + 2] .. '|' .. accepted)
      redis.call('HINCRBY', KEYS[6], string.lower(status), -1)
      if status == 'QUEUED' and quantity > 1 then
        redis.call('HINCRBY', KEYS[6], 'queued_extra', 1 - quantity)
      end
      redis.call('HINCRBY', KEYS[6], 'cancelled', 1)
      redis.call('ZREM', KEYS[4], id)
      returned = returned + quantity
    end
  end
end
-- The set of returned units may be new: it ends with the sale.
local expires = tonumber(redis.call('HGET', KEYS[6], 'expires') or '0')
if returned > 0 and expires > 0 then
  redis.call('PEXPIREAT', KEYS[5], expires)
end
return returned
