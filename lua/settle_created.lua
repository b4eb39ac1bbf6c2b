-- settle_created.lua: mark orders CREATED once PostgreSQL committed their
-- rows, and clear their reservations, for one sale.
--
-- KEYS[1] meta (the status counters), KEYS[2] orders, KEYS[3] reserved
-- ARGV: order id, user id, accepted (ms), repeated for every order
--
-- Returns how many orders changed status.
--
-- Invariant: the counters queued / created / failed stay equal to the
-- statuses in the orders hash: each order moves from the status it had. An
-- order the hash does not hold (another round's, or one Redis lost) is not
-- added: its status is PostgreSQL's to tell.
local changed = 0
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  local old = redis.call('HGET', KEYS[2], id)
  local status = old and string.match(old, '^([^|]*)')
  if old and status ~= 'CREATED' then
    if status == 'QUEUED' then
      redis.call('HINCRBY', KEYS[1], 'queued', -1)
    elseif status == 'FAILED' then
      redis.call('HINCRBY', KEYS[1], 'failed', -1)
    end
    redis.call('HINCRBY', KEYS[1], 'created', 1)
    redis.call('HSET', KEYS[2], id, 'CREATED|' .. ARGV[i + 1] .. '||' .. ARGV[i + 2])
    changed = changed + 1
  end
  redis.call('ZREM', KEYS[3], id)
end
return changed
