-- The seed article's deduction (resources/lua/seckill.lua), as published:
-- four commands, no window, no order id, no reservation. `make bench`
-- measures the edge against a handler running this (lua_reference --seed).
-- KEYS[1] stock, KEYS[2] buyers (set); ARGV[1] user id
-- Returns 1 bought, 0 sold out, 2 bought before, -1 no stock key.
local stock = tonumber(redis.call('get', KEYS[1]))
if stock == nil then return -1 end
if redis.call('sismember', KEYS[2], ARGV[1]) == 1 then return 2 end
if stock <= 0 then return 0 end
redis.call('decr', KEYS[1])
redis.call('sadd', KEYS[2], ARGV[1])
return 1
