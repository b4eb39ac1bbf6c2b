-- void.lua: make sure a deduction call whose outcome the edge could not
-- hear, or whose orders the replicas did not confirm, keeps nothing the
-- edge may still take back — so that its buyers may be answered 503
-- truthfully — and say which of its orders stand.
--
-- KEYS[1] call (the call's outcome, as deduct.lua keeps it), KEYS[2] stock,
-- KEYS[3] buyers, KEYS[4] orders, KEYS[5] reserved, KEYS[6] meta,
-- KEYS[7] trace
-- ARGV[1] how long the verdict is kept (ms), ARGV[2] the reason recorded
-- (VOIDED), ARGV[3] the call's publish deadline (ms), ARGV[4], ARGV[5], ...:
-- user id, nonce per request of the call
--
-- Returns one answer per request: {1} its order undone (unit back, buyer
-- free, FAILED); {0} it holds nothing (the call never ran, or did not
-- accept it, or its order was settled FAILED since); {2, order id,
-- accepted ms, round} its order stands: past its publish deadline (the
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
local n = (#ARGV - 3) / 2
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
local round = tonumber(redis.call('HGET', KEYS[6], 'round')) or 0
local i = 0
for code in string.gmatch(prior, '[^,]+') do
  i = i + 1
  results[i] = {0}
  local user, nonce = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local order_id = redis.call('HGET', KEYS[3], user)
  if tonumber(code) == 1 and order_id and string.sub(order_id, -#nonce - 1) == '-' .. nonce then
    local value = redis.call('HGET', KEYS[4], order_id) or ''
    local accepted = tonumber(string.match(value, '([^|]*)$')) or 0
    local status = string.sub(value, 1, 1)
    if string.sub(value, 1, 7) == 'QUEUED|' and now < accepted + deadline then
      redis.call('INCR', KEYS[2])
      redis.call('HDEL', KEYS[3], user)
      redis.call('HSET', KEYS[4], order_id, 'FAILED|' .. user .. '|' .. ARGV[2] .. '|' .. accepted)
      redis.call('HINCRBY', KEYS[6], 'queued', -1)
      redis.call('HINCRBY', KEYS[6], 'failed', 1)
      redis.call('ZREM', KEYS[5], order_id)
      redis.call('HDEL', KEYS[7], order_id)
      results[i] = {1}
    elseif status == 'Q' or status == 'C' or status == 'P' then
      local trace = redis.call('HGET', KEYS[7], order_id)
      local of = trace and tonumber(string.match(trace, '^([^|]*)')) or round
      results[i] = {2, order_id, accepted, of}
    end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return results
