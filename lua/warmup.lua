-- warmup.lua: load (or re-load) one sale round into Redis.
--
-- KEYS[1] meta, KEYS[2] stock, KEYS[3] buyers, KEYS[4] orders,
-- KEYS[5] reserved, KEYS[6] compensated, KEYS[7] written_off, KEYS[8] seq,
-- KEYS[9] returned (units cancelled orders gave back), KEYS[10] trace,
-- KEYS[11] lent, KEYS[12] received (units moved between a sale's buckets),
-- KEYS[13] held (users' places, with a limit above one unit per user)
-- ARGV[1] stock, ARGV[2] starts (ms, 0 = none), ARGV[3] ends (ms, 0 = none),
-- ARGV[4] round, ARGV[5] expire at (ms, 0 = never): when every key of the
--         sale expires; kept in meta as 'expires', so the scripts that
--         create a key later (buyers, orders, reservations, ...) give it
--         the same end,
-- ARGV[6] "1" to replace a round that still has orders in flight
-- ARGV[7] the round's buckets ("0,5,17"; "0" for a sale of one), ARGV[8]
--         how many, ARGV[9] this bucket's place among them (the users it
--         serves: user id mod ARGV[8]; -1 for none, a bucket retired),
-- ARGV[10] the warm-up's id (kept in meta as 'warmup'), ARGV[11] "1" when
--         the round is sold only with an admission from its waiting room
--         (kept in meta as 'admission'; deduct.lua refuses a request
--         without one), ARGV[12] the units one user may hold in the round
--         (meta 'limit'), ARGV[13] the units one order may hold ('max')
--
-- Returns 1 loaded, 2 loaded before by this warm-up (left as it is: it may
-- be selling — a warm-up run again finishes what it began, never resets
-- what it loaded), 0 refused: the previous round has orders in flight
-- (reserved, or QUEUED) and ARGV[6] is not "1". Checking and loading in one
-- script means no deduction can slip in between.
--
-- Invariant: stock is SET, never added; the previous round's buyers,
-- statuses, reservations and counters are cleared; the order counter is
-- kept while the sale lives (order ids stay unique after it expires too:
-- each carries a random nonce). Every key of a sale with an end expires at
-- ARGV[5], whichever script creates it.
local current = redis.call('HMGET', KEYS[1], 'round', 'warmup', 'warming')
if current[1] == ARGV[4] and current[2] == ARGV[10] and not current[3] then
  return 2
end
if ARGV[6] ~= '1' then
  local queued = tonumber(redis.call('HGET', KEYS[1], 'queued') or '0')
  if queued > 0 or redis.call('ZCARD', KEYS[5]) > 0 then
    return 0
  end
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13])
redis.call('HSET', KEYS[1], 'total', ARGV[1], 'starts', ARGV[2], 'ends', ARGV[3], 'round', ARGV[4],
  'queued', 0, 'created', 0, 'failed', 0, 'cancelled', 0, 'expires', ARGV[5],
  'buckets', ARGV[7], 'of', ARGV[8], 'home', ARGV[9], 'warmup', ARGV[10],
  'admission', ARGV[11], 'limit', ARGV[12], 'max', ARGV[13])
redis.call('SET', KEYS[2], ARGV[1])
-- The keys that exist now; the others get their expiry when created.
for _, i in ipairs({ 1, 2, 8 }) do
  if tonumber(ARGV[5]) > 0 then
    redis.call('PEXPIREAT', KEYS[i], ARGV[5])
  else
    redis.call('PERSIST', KEYS[i])
  end
end
return 1
