-- warmup.lua: load (or re-load) one sale round into Redis.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3] buyers, KEYS[4] orders,
-- KEYS[5] reserved, KEYS[6] compensated, KEYS[7] written_off, KEYS[8] seq
-- ARGV[1] stock, ARGV[2] starts (ms, 0 = none), ARGV[3] ends (ms, 0 = none),
-- ARGV[4] round, ARGV[5] expire at (ms, 0 = never)
--
-- Returns 1. Whether the previous round may be replaced (no orders in
-- flight, or forced) is decided by the caller, under the sale's warm-up
-- lock, before it starts the round in PostgreSQL.
--
-- Invariant: stock is SET, never added; the previous round's buyers,
-- statuses and reservations are cleared; the order counter is kept so order
-- ids never repeat.
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
