-- release_give.lua: give a release's takes back: their orders were refused,
-- undone, cancelled, expired or settled FAILED; or (ARGV[1] 'pending') the
-- sweep found them pending past their time with no order made.
--
-- KEYS[1] held, KEYS[2] takes, KEYS[3] pending (lua/release_take.lua says
-- what they hold)
-- ARGV[1] 'any': every take named is given back, whatever its state;
--         'pending': only those still pending (one kept meanwhile stays)
-- ARGV[2], ARGV[3], ...: take ids
--
-- Returns {units given back now, takes given back now}.
--
-- Invariant: a take is given back at most once (its entry goes with it),
-- and its user's held goes down by its quantity (the field goes at zero).
local PENDING = 'P'
local units, takes = 0, 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local value = redis.call('HGET', KEYS[2], id)
  local user, quantity, stage
  if value then
    user, quantity, stage = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|')
  end
  if value and (ARGV[1] == 'any' or stage == PENDING) then
    quantity = tonumber(quantity)
    if redis.call('HINCRBY', KEYS[1], user, -quantity) <= 0 then
      redis.call('HDEL', KEYS[1], user)
    end
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    units, takes = units + quantity, takes + 1
  end
end
return { units, takes }
