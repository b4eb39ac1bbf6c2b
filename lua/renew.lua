-- renew.lua: extend a held lock's lease (the watchdog's heartbeat).
--
-- KEYS[1] the lock; ARGV[1] the holder's token, ARGV[2] lease (ms)
-- Returns 1 when renewed, 0 when the lock is lost (not the caller's any more).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
