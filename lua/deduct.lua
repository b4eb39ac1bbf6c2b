-- deduct.lua: the whole flash-sale decision for one request, atomically.
--
-- KEYS[1] meta      hash  total, starts (ms, 0 = none), ends (ms, 0 = none),
--                         round, and the counters queued / created / failed
-- KEYS[2] stock     string, units left
-- KEYS[3] buyers    hash  user id -> order id
-- KEYS[4] orders    hash  order id -> "STATUS|user|reason|accepted_ms"
-- KEYS[5] reserved  zset  order id scored by when it may be swept: the time
--                         after which its record cannot land any more
-- KEYS[6] seq       string, per-sale order counter (never reset, never expires)
-- ARGV[1] user id, ARGV[2] nonce (hex, 64 random bits, from the edge),
-- ARGV[3] activity id, ARGV[4] sku id,
-- ARGV[5] publish deadline (ms): how long the edge may take to learn whether
--         the order's record is in the log
--
-- Returns {code, round, order_id?, stock_left?, accepted_ms?}:
--   1 accepted, -1 SALE_NOT_FOUND, -2 SALE_NOT_ACTIVE, -3 ALREADY_PURCHASED
--   (order_id = the user's order), -4 SOLD_OUT.
--
-- Invariant: stock never goes below zero and a user holds at most one order
-- per round; every accepted unit leaves a reservation until it is settled.
-- Time is Redis's own (TIME), so the window, acceptedAt and the sweeper's
-- deadlines all read one clock whatever the edges' clocks say. The nonce
-- keeps order ids unique even if Redis restarts with a counter that went
-- back (AOF everysec may lose the last second).
local meta = redis.call('HMGET', KEYS[1], 'starts', 'ends', 'round')
if not meta[3] then
  return {-1, 0}
end
local round = tonumber(meta[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local starts = tonumber(meta[1]) or 0
local ends = tonumber(meta[2]) or 0
if (starts > 0 and now < starts) or (ends > 0 and now >= ends) then
  return {-2, round}
end
local existing = redis.call('HGET', KEYS[3], ARGV[1])
if existing then
  return {-3, round, existing}
end
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
if stock <= 0 then
  return {-4, round}
end
redis.call('DECR', KEYS[2])
local seq = redis.call('INCR', KEYS[6])
local order_id = ARGV[3] .. '-' .. ARGV[4] .. '-' .. seq .. '-' .. ARGV[2]
redis.call('HSET', KEYS[3], ARGV[1], order_id)
redis.call('HSET', KEYS[4], order_id, 'QUEUED|' .. ARGV[1] .. '||' .. now)
redis.call('HINCRBY', KEYS[1], 'queued', 1)
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[5]), order_id)
return {1, round, order_id, stock - 1, now}
