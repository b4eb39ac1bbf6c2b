-- deduct.lua: the whole flash-sale decision for a batch of requests of one
-- sale, atomically, each decided exactly as if it ran alone, in order.
--
-- KEYS[1] meta      hash  total, starts (ms, 0 = none), ends (ms, 0 = none),
--                         round, and the counters queued / created / failed
-- KEYS[2] stock     string, units left
-- KEYS[3] buyers    hash  user id -> order id
-- KEYS[4] orders    hash  order id -> "STATUS|user|reason|accepted_ms"
-- KEYS[5] reserved  zset  order id scored by when it may be swept: the time
--                         after which its record cannot land any more
-- KEYS[6] seq       string, per-sale order counter (never reset, never expires)
-- ARGV[1] activity id, ARGV[2] sku id,
-- ARGV[3] publish deadline (ms): how long the edge may take to learn whether
--         the order's record is in the log
-- ARGV[4], ARGV[5], ...: user id, nonce (hex, 64 random bits, from the
--         edge): one pair per request, decided in the order given
--
-- Returns one {code, round, order_id?, stock_left?, accepted_ms?} per
-- request, in order:
--   1 accepted, -1 SALE_NOT_FOUND, -2 SALE_NOT_ACTIVE, -3 ALREADY_PURCHASED
--   (order_id = the user's order), -4 SOLD_OUT.
--
-- Invariant: stock never goes below zero and a user holds at most one order
-- per round (a user twice in one batch: the second is ALREADY_PURCHASED);
-- every accepted unit leaves a reservation until it is settled. Time is
-- Redis's own (TIME), so the window, acceptedAt and the sweeper's deadlines
-- all read one clock whatever the edges' clocks say. The nonce keeps order
-- ids unique even if Redis restarts with a counter that went back (AOF
-- everysec may lose the last second).
local n = (#ARGV - 3) / 2
local answers = {}
local meta = redis.call('HMGET', KEYS[1], 'starts', 'ends', 'round')
if not meta[3] then
  for i = 1, n do answers[i] = {-1, 0} end
  return answers
end
local round = tonumber(meta[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local starts = tonumber(meta[1]) or 0
local ends = tonumber(meta[2]) or 0
if (starts > 0 and now < starts) or (ends > 0 and now >= ends) then
  for i = 1, n do answers[i] = {-2, round} end
  return answers
end
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
local deadline = now + tonumber(ARGV[3])
local accepted = 0
for i = 1, n do
  local user, nonce = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local existing = redis.call('HGET', KEYS[3], user)
  if existing then
    answers[i] = {-3, round, existing}
  elseif stock <= 0 then
    answers[i] = {-4, round}
  else
    stock = stock - 1
    accepted = accepted + 1
    local seq = redis.call('INCR', KEYS[6])
    local order_id = ARGV[1] .. '-' .. ARGV[2] .. '-' .. seq .. '-' .. nonce
    redis.call('HSET', KEYS[3], user, order_id)
    redis.call('HSET', KEYS[4], order_id, 'QUEUED|' .. user .. '||' .. now)
    redis.call('ZADD', KEYS[5], deadline, order_id)
    answers[i] = {1, round, order_id, stock, now}
  end
end
if accepted > 0 then
  -- DECRBY keeps the key's time to live.
  redis.call('DECRBY', KEYS[2], accepted)
  redis.call('HINCRBY', KEYS[1], 'queued', accepted)
end
return answers
