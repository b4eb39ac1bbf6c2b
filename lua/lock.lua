-- lock.lua: acquire a lock and mint its fencing token in one step.
--
-- KEYS[1] the lock, KEYS[2] its fencing counter (same hash tag)
-- ARGV[1] the holder's unique token, ARGV[2] lease (ms)
--
-- Returns the fencing token (> 0) when acquired, 0 when another holder has it.
-- Invariant: every successful acquire gets a token greater than all before.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
