-- unlock.lua: release a lock only if the caller still holds it.
--
-- KEYS[1] the lock; ARGV[1] the holder's token
-- Returns 1 when released, 0 when the lock was no longer the caller's (its
-- lease ran out, and someone else may hold it now: nothing is deleted).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
