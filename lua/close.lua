-- close.lua: close a sale now: no order is accepted after this, and every
-- key of the sale expires once its last order's payment window and the
-- margin have passed.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3] buyers, KEYS[4] orders,
-- KEYS[5] reserved, KEYS[6] compensated, KEYS[7] written_off, KEYS[8] seq,
-- KEYS[9] returned, KEYS[10] trace, KEYS[11] lent, KEYS[12] received,
-- KEYS[13] held
-- ARGV[1] the payment window plus the margin (ms)
--
-- Returns the end in force (ms): now, or an earlier end the sale had; 0
-- when Redis holds no round of the sale (nothing to close here).
--
-- Invariant: an end only moves earlier; the keys' expiry is written in
-- meta ('expires') too, so a key a script creates later ends with the rest.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = tonumber(redis.call('HGET', KEYS[1], 'ends') or '0') or 0
if ends == 0 or ends > now then
  ends = now
end
local expires = ends + tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'ends', ends, 'expires', expires)
for i = 1, #KEYS do
  redis.call('PEXPIREAT', KEYS[i], expires)
end
return ends
