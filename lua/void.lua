-- void.lua: make sure a deduction call whose outcome the edge could not
-- hear, or whose orders the replicas did not confirm, keeps nothing the
-- edge may still take back — so that its buyers may be answered 503
-- truthfully — and say which of its orders stand.
--
-- KEYS[1] call (the call's outcome, as deduct.lua keeps it), KEYS[2] stock,
-- KEYS[3] buyers, KEYS[4] orders, KEYS[5] reserved, KEYS[6] meta,
-- KEYS[7] trace, KEYS[8] held (users' places)
-- ARGV[1] how long the verdict is kept (ms), ARGV[2] the reason recorded
-- (VOIDED), ARGV[3] the call's publish deadline (ms), ARGV[4], ARGV[5], ...:
-- user id, nonce, quantity per request of the call
--
-- Returns one answer per request: {1} its order undone (units back, buyer
-- and place free, FAILED); {0} it holds nothing (the call never ran, or did not
-- accept it, or its order was settled FAILED since); {2, order id,
-- accepted ms, round, slot} its order stands: past its publish deadline (the
-- reservation is the sweeper's now: it publishes the record again) or
-- written since (CREATED and after).
--
-- Invariant: afterwards the call can take nothing more. If it never ran,
-- its verdict says so ("V"), and the call, arriving late, deducts nothing
-- (deduct.lua answers -5); if it ran, its outcome is kept (asked again, the
-- call answers for the orders that stand and -5 for the others). An order
-- is undone only before its publish deadline, on Redis's clock: after it,
-- the sweeper may have published its record, and undoing it then could
-- give back a unit PostgreSQL writes CREATED.
local n = (#ARGV - 3) / 3
local results = {}
local prior = redis.call('GET', KEYS[1])
if not prior or prior == 'V' then
  redis.call('SET', KEYS[1], 'V', 'PX', ARGV[1])
  for i = 1, n do results[i] = {0} end
  return results
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local deadline = tonumber(ARGV[3])
local meta = redis.call('HMGET', KEYS[6], 'round', 'limit')
local round, limit = tonumber(meta[1]) or 0, tonumber(meta[2]) or 1
local i = 0
for entry in string.gmatch(prior, '[^,]+') do
  i = i + 1
  results[i] = {0}
  local user, nonce, quantity = ARGV[1 + 3 * i], ARGV[2 + 3 * i], tonumber(ARGV[3 + 3 * i])
  -- The call kept the ids of the orders it accepted (before quantities:
  -- "1", the order found as the user's whose id ends in the nonce).
  local order_id = not tonumber(entry) and entry
  if entry == '1' then
    local held = redis.call('HGET', KEYS[3], user)
    order_id = held and string.sub(held, -#nonce - 1) == '-' .. nonce and held
  end
  if order_id then
    local value = redis.call('HGET', KEYS[4], order_id) or ''
    local accepted = tonumber(string.match(value, '([^|]*)$')) or 0
    if string.sub(value, 1, 7) == 'QUEUED|' and now < accepted + deadline then
      redis.call('INCRBY', KEYS[2], quantity)
      if redis.call('HGET', KEYS[3], user) == order_id then
        redis.call('HDEL', KEYS[3], user)
      end
      for slot = 0, limit - 1 do
        local place = user .. '/' .. slot
        if limit > 1 and redis.call('HGET', KEYS[8], place) == order_id .. '|' .. quantity then
          redis.call('HDEL', KEYS[8], place)
        end
      end
      redis.call('HSET', KEYS[4], order_id, 'FAILED|' .. user .. '|' .. ARGV[2] .. '|' .. accepted)
      redis.call('HINCRBY', KEYS[6], 'queued', -1)
      if quantity > 1 then
        redis.call('HINCRBY', KEYS[6], 'queued_extra', 1 - quantity)
      end
      redis.call('HINCRBY', KEYS[6], 'failed', 1)
      redis.call('ZREM', KEYS[5], order_id)
      redis.call('HDEL', KEYS[7], order_id)
      results[i] = {1}
    elseif string.sub(value, 1, 7) == 'QUEUED|' or string.sub(value, 1, 8) == 'CREATED|' or string.sub(value, 1, 5) == 'PAID|' then
      local trace = redis.call('HGET', KEYS[7], order_id)
      local of = trace and tonumber(string.match(trace, '^([^|]*)')) or round
      local held = 0
      for slot = 1, limit - 1 do
        if redis.call('HGET', KEYS[8], user .. '/' .. slot) == order_id .. '|' .. quantity then held = slot end
      end
      results[i] = {2, order_id, accepted, of, held}
    end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return results
