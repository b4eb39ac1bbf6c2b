-- confirm.lua: reads one field of a hash, or one member of a set, of a
-- bucket of a sale and, when it is there, writes a mark on the bucket's
-- meta: a WAIT sent right behind this call (one pipeline, so one connection
-- to one server) then counts the replicas that hold it, and everything this
-- server wrote before it. Whoever builds on a step (a unit lent, received,
-- given back) confirms it so first: a failover to a replica that never had
-- it finds it missing here, which is "not confirmed".
--
-- KEYS[1] the hash or set, KEYS[2] the bucket's meta
-- ARGV[1] 'field' or 'member', ARGV[2] the field or member
--
-- Returns the field's value (a hash), 1 (a set member), or false when it is
-- not there or the bucket holds no sale (nothing is written then, and a
-- WAIT behind it confirms nothing of it).
--
-- Invariant: writes only the meta's `marks` counter, and only of a bucket
-- that exists.
local found
if ARGV[1] == 'field' then
  found = redis.call('HGET', KEYS[1], ARGV[2])
elseif redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 1 then
  found = 1
end
if not found or redis.call('EXISTS', KEYS[2]) == 0 then
  return false
end
redis.call('HINCRBY', KEYS[2], 'marks', 1)
return found
