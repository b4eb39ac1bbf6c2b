-- warmup.lua: load (or re-load) one sale round into Redis.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3] buyers, KEYS[4] orders,
-- KEYS[5] reserved, KEYS[6] compensated, KEYS[7] written_off, KEYS[8] seq
-- ARGV[1] stock, ARGV[2] starts (ms, 0 = none), ARGV[3] ends (ms, 0 = none),
-- ARGV[4] round, ARGV[5] expire at (ms, 0 = never), ARGV[6] "1" = force
--
-- Returns 1 when loaded, -1 when the previous round still has orders in
-- flight (reserved or QUEUED) and force was not given: nothing changed.
--
-- Invariant: stock is SET, never added; the previous round's buyers,
-- statuses and reservations are cleared; the order counter is kept so order
-- ids never repeat.
if ARGV[6] ~= '1' then
  if redis.call('ZCARD', KEYS[5]) > 0 then
    return -1
  end
  for _, value in ipairs(redis.call('HVALS', KEYS[4])) do
    if string.sub(value, 1, 7) == 'QUEUED|' then
      return -1
    end
  end
end
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
redis.call('HSET', KEYS[1], 'total', ARGV[1], 'starts', ARGV[2], 'ends', ARGV[3], 'round', ARGV[4])
redis.call('SET', KEYS[2], ARGV[1])
if tonumber(ARGV[5]) > 0 then
  for i = 1, 8 do
    redis.call('PEXPIREAT', KEYS[i], ARGV[5])
  end
else
  for i = 1, 8 do
    redis.call('PERSIST', KEYS[i])
  end
end
return 1
