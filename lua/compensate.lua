-- compensate.lua: settle one FAILED order in Redis, at most once per order id.
--
-- KEYS[1] stock, KEYS[2] buyers, KEYS[3] orders, KEYS[4] reserved,
-- KEYS[5] compensated (set: order ids whose unit was restored),
-- KEYS[6] written_off (set: order ids whose unit the database never had),
-- KEYS[7] meta (the status counters), KEYS[8] trace, KEYS[9] held (users'
-- places)
-- ARGV[1] order id, ARGV[2] user id, ARGV[3] reason,
-- ARGV[4] "1" to remove the buyer and free their place (the user may try
--         again), "0" to keep them,
-- ARGV[5] "restore" (stock + the order's quantity) or "writeoff" (no unit
--         back: bring stock down to ARGV[6], never up: Redis counted units
--         the database lacks)
-- ARGV[6] the database's remaining stock (writeoff only), ARGV[7] the
--         order's quantity, ARGV[8] its slot (the user's place)
--
-- Returns 1 settled now, 0 already settled by an earlier call, -1 Redis never
-- minted this order (nothing to restore), -2 the order is CREATED (never
-- restore; a CANCELLED order was created too: cancel.lua gave its unit back), -3 it was rolled back by the edge already.
--
-- Invariant: an order's units go back to the sale at most once per order id,
-- all at once, and only for an order Redis itself accepted.
local id = ARGV[1]
-- A sale whose keys expired: nothing is recreated (Redis holds no unit of
-- it to give back).
if redis.call('EXISTS', KEYS[7]) == 0 then
  return -1
end
if redis.call('SISMEMBER', KEYS[5], id) == 1 or redis.call('SISMEMBER', KEYS[6], id) == 1 then
  return 0
end
local value = redis.call('HGET', KEYS[3], id)
if not value then
  return -1
end
local status = string.match(value, '^([^|]*)')
if status == 'CREATED' or status == 'CANCELLED' then
  return -2
end
if status == 'FAILED' then
  return -3
end
local accepted = string.match(value, '([^|]*)$')
if ARGV[5] == 'restore' then
  redis.call('SADD', KEYS[5], id)
  redis.call('INCRBY', KEYS[1], ARGV[7])
else
  redis.call('SADD', KEYS[6], id)
  local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
  local target = tonumber(ARGV[6])
  if stock > target then
    redis.call('SET', KEYS[1], target, 'KEEPTTL')
  end
end
if ARGV[4] == '1' and redis.call('HGET', KEYS[2], ARGV[2]) == id then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
local place = ARGV[2] .. '/' .. ARGV[8]
if ARGV[4] == '1' and redis.call('HGET', KEYS[9], place) == id .. '|' .. ARGV[7] then
  redis.call('HDEL', KEYS[9], place)
end
redis.call('HSET', KEYS[3], id, 'FAILED|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. accepted)
redis.call('HINCRBY', KEYS[7], 'queued', -1)
if tonumber(ARGV[7]) > 1 then
  redis.call('HINCRBY', KEYS[7], 'queued_extra', 1 - tonumber(ARGV[7]))
end
redis.call('HINCRBY', KEYS[7], 'failed', 1)
redis.call('ZREM', KEYS[4], id)
redis.call('HDEL', KEYS[8], id)
-- The settled sets may be new: they end with the sale.
local expires = tonumber(redis.call('HGET', KEYS[7], 'expires') or '0')
if expires > 0 then
  redis.call('PEXPIREAT', KEYS[5], expires)
  redis.call('PEXPIREAT', KEYS[6], expires)
end
return 1
