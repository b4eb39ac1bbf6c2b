-- void.lua: make sure a deduction call the edge never heard the outcome of
-- keeps nothing, so that its buyers may be answered 503 truthfully.
--
-- KEYS[1] call (the call's outcome, as deduct.lua keeps it), KEYS[2] stock,
-- KEYS[3] buyers, KEYS[4] orders, KEYS[5] reserved, KEYS[6] meta,
-- KEYS[7] trace
-- ARGV[1] how long the verdict is kept (ms), ARGV[2] the reason recorded
-- (VOIDED), ARGV[3], ARGV[4], ...: user id, nonce per request of the call
--
-- Returns how many units went back (0 when the call never ran, or was
-- voided before).
--
-- Invariant: afterwards the call holds no unit. If it never ran, its
-- verdict says so ("V"), and the call, arriving late, deducts nothing
-- (deduct.lua answers -5). If it ran, every order it accepted that is still
-- QUEUED is undone exactly as rollback.lua undoes one: unit back, buyer
-- free, order FAILED, reservation gone. An order no longer QUEUED was
-- settled by someone else and is left alone.
local prior = redis.call('GET', KEYS[1])
local undone = 0
if prior and prior ~= 'V' then
  local i = 0
  for code in string.gmatch(prior, '[^,]+') do
    i = i + 1
    if tonumber(code) == 1 then
      local user, nonce = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
      local order_id = redis.call('HGET', KEYS[3], user)
      if order_id and string.sub(order_id, -#nonce - 1) == '-' .. nonce then
        local value = redis.call('HGET', KEYS[4], order_id)
        if value and string.sub(value, 1, 7) == 'QUEUED|' then
          local accepted = string.match(value, '([^|]*)$')
          redis.call('INCR', KEYS[2])
          redis.call('HDEL', KEYS[3], user)
          redis.call('HSET', KEYS[4], order_id, 'FAILED|' .. user .. '|' .. ARGV[2] .. '|' .. accepted)
          redis.call('HINCRBY', KEYS[6], 'queued', -1)
          redis.call('HINCRBY', KEYS[6], 'failed', 1)
          redis.call('ZREM', KEYS[5], order_id)
          redis.call('HDEL', KEYS[7], order_id)
          undone = undone + 1
        end
      end
    end
  end
end
redis.call('SET', KEYS[1], 'V', 'PX', ARGV[1])
return undone
