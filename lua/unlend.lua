-- unlend.lua: a transfer the receiver refused (it holds another round now,
-- receive.lua answered -1) gives its units back to the lender, if the
-- lender still holds the round they were lent in; otherwise they went with
-- that round. Either way the transfer is no longer logged.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3] lent (hash transfer id ->
--         "to|units|round|at_ms")
-- ARGV[1] transfer id
--
-- Returns the units given back: 0 when they went with their round, or the
-- transfer is not logged (given back before).
--
-- Invariant: units only move; `lent` minus the receivers' `borrowed` stays
-- the units logged and not received.
local logged = redis.call('HGET', KEYS[3], ARGV[1])
if not logged then
  return 0
end
redis.call('HDEL', KEYS[3], ARGV[1])
local units, round = string.match(logged, '^[^|]*|([^|]*)|([^|]*)|')
if redis.call('HGET', KEYS[1], 'round') ~= round then
  return 0
end
-- INCRBY keeps the key's time to live.
redis.call('INCRBY', KEYS[2], units)
redis.call('HINCRBY', KEYS[1], 'lent', -tonumber(units))
return tonumber(units)
