-- freeze.lua: hold one bucket of a sale still while a warm-up replaces
-- every bucket of the round: checks, as warmup.lua does, that the round
-- has no orders in flight, and marks the bucket 'warming' so no deduction
-- is accepted in it until the warm-up loads it (warmup.lua clears the
-- mark with the rest of meta) or gives up (HDEL meta warming).
--
-- KEYS[1] meta, KEYS[2] reserved
-- ARGV[1] "1" to freeze a round that still has orders in flight
--
-- Returns 1 frozen (or nothing to freeze: no round here), 0 refused: the
-- round has orders in flight (reserved, or QUEUED) and ARGV[1] is not "1".
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
if ARGV[1] ~= '1' then
  local queued = tonumber(redis.call('HGET', KEYS[1], 'queued') or '0')
  if queued > 0 or redis.call('ZCARD', KEYS[2]) > 0 then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'warming', 1)
return 1
