-- receive.lua: a bucket takes in the units another bucket of its sale lent
-- it (lend.lua), once per transfer.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3] received (set of transfer ids)
-- ARGV[1] transfer id, ARGV[2] units, ARGV[3] the round they were lent in
--
-- Returns 1 taken in now, 0 taken in before (asked again: nothing added),
-- -1 this bucket holds another round now (or none): the units belong to a
-- round that is gone, and are not added to this one.
--
-- Invariant: a transfer's units are added at most once, and only to the
-- round they were lent in.
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  return 0
end
local meta = redis.call('HMGET', KEYS[1], 'round', 'expires')
if not meta[1] or meta[1] ~= ARGV[3] then
  return -1
end
redis.call('INCRBY', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'borrowed', ARGV[2])
local expires = tonumber(meta[2]) or 0
if expires > 0 then
  redis.call('PEXPIREAT', KEYS[3], expires)
end
return 1
