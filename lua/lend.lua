-- lend.lua: a bucket of a sale gives units to another bucket of the same
-- round whose stock ran out (the first half of a transfer; receive.lua on
-- the other bucket is the second). A bucket is a key set in a slot of its
-- own, so no script can touch both: the transfer is logged here, under its
-- id, until the receiver has it.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3] lent (hash transfer id ->
--         "to|units|round|at_ms")
-- ARGV[1] transfer id, ARGV[2] the receiving bucket, ARGV[3] the round the
--         receiver holds
--
-- Returns the units lent: half the stock, rounded up (at least one while any
-- is left); 0 when none is left; -2 when none is left here but units this
-- bucket lent are still on their way to another (logged, not yet forgotten:
-- the sale is not sold out until they arrive); -1 when this bucket holds
-- another round (or none). Asked again with the same transfer id, the units
-- it lent then.
--
-- Invariant: units only move (stock here goes down by exactly what the log
-- says was lent); a transfer lends once.
local prior = redis.call('HGET', KEYS[3], ARGV[1])
if prior then
  return tonumber(string.match(prior, '^[^|]*|([^|]*)'))
end
local meta = redis.call('HMGET', KEYS[1], 'round', 'expires')
if not meta[1] or meta[1] ~= ARGV[3] then
  return -1
end
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
if stock <= 0 then
  if redis.call('HLEN', KEYS[3]) > 0 then
    return -2
  end
  return 0
end
local units = math.ceil(stock / 2)
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- DECRBY keeps the key's time to live.
redis.call('DECRBY', KEYS[2], units)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. '|' .. units .. '|' .. ARGV[3] .. '|' .. now)
redis.call('HINCRBY', KEYS[1], 'lent', units)
local expires = tonumber(meta[2]) or 0
if expires > 0 then
  redis.call('PEXPIREAT', KEYS[3], expires)
end
return units
