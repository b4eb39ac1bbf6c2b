-- lock.lua: acquire a lock and mint its fencing token in one step.
--
-- KEYS[1] the lock, KEYS[2] its fencing counter (same hash tag)
-- ARGV[1] the holder's unique token, ARGV[2] lease (ms),
-- ARGV[3] the newest token the guarded storage has seen (0 when none)
--
-- Returns the fencing token (> 0) when acquired, 0 when another holder has it.
-- Invariant: every successful acquire gets a token greater than all before,
-- also after Redis lost the counter: the caller passes the newest token its
-- storage recorded, and the counter is moved past it. The counter expires an
-- hour after the last acquire (a finished sale's lock leaves nothing
-- behind): a lock whose tokens storage checks passes that storage's newest
-- token, so a counter that expired is moved past it just the same.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.call('INCR', KEYS[2])
  local floor = tonumber(ARGV[3])
  if token <= floor then
    token = floor + 1
    redis.call('SET', KEYS[2], token)
  end
  redis.call('PEXPIRE', KEYS[2], 3600000)
  return token
end
return 0
