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
-- One read of every buyer and one write per key for the whole batch: the
-- batch's own purchases are kept in `bought`, so a user twice in it is seen.
local users = {}
for i = 1, n do users[i] = ARGV[2 + 2 * i] end
local held = redis.call('HMGET', KEYS[3], unpack(users))
local seq = tonumber(redis.call('GET', KEYS[6]) or '0')
local bought, buyers, orders, reserved = {}, {}, {}, {}
local accepted = 0
for i = 1, n do
  local user, nonce = users[i], ARGV[3 + 2 * i]
  local existing = held[i] or bought[user]
  if existing then
    answers[i] = {-3, round, existing}
  elseif stock <= 0 then
    answers[i] = {-4, round}
  else
    stock = stock - 1
    accepted = accepted + 1
    seq = seq + 1
    local order_id = ARGV[1] .. '-' .. ARGV[2] .. '-' .. seq .. '-' .. nonce
    bought[user] = order_id
    local at = 2 * accepted
    buyers[at - 1], buyers[at] = user, order_id
    orders[at - 1], orders[at] = order_id, 'QUEUED|' .. user .. '||' .. now
    reserved[at - 1], reserved[at] = deadline, order_id
    answers[i] = {1, round, order_id, stock, now}
  end
end
if accepted > 0 then
  redis.call('HSET', KEYS[3], unpack(buyers))
  redis.call('HSET', KEYS[4], unpack(orders))
  redis.call('ZADD', KEYS[5], unpack(reserved))
  redis.call('INCRBY', KEYS[6], accepted)
  -- DECRBY keeps the key's time to live.
  redis.call('DECRBY', KEYS[2], accepted)
  redis.call('HINCRBY', KEYS[1], 'queued', accepted)
end
return answers
