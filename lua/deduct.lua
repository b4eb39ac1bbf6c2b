-- deduct.lua: the whole flash-sale decision for a batch of requests of one
-- sale, atomically, each decided exactly as if it ran alone, in order; and
-- the batch's outcome kept for a while under its call id, so an edge that
-- did not hear the answer (a timeout, a dropped connection) asks again with
-- the same id and hears the outcome instead of deducting twice.
--
-- KEYS[1] meta      hash  total, starts (ms, 0 = none), ends (ms, 0 = none),
--                         round, the counters queued / created / failed,
--                         and of a sale in buckets: how many ('of'), this
--                         one's place ('home'), and 'warming' while a
--                         warm-up replaces the round
-- KEYS[2] stock     string, units left
-- KEYS[3] buyers    hash  user id -> order id
-- KEYS[4] orders    hash  order id -> "STATUS|user|reason|accepted_ms"
-- KEYS[5] reserved  zset  order id scored by when it may be swept: the time
--                         after which its record cannot land any more
-- KEYS[6] seq       string, per-sale order counter (never reset while the
--                   sale lives)
-- KEYS[7] call      string, this call's outcome when it kept something ("V":
--                         voided), kept ARGV[5] ms
-- KEYS[8] trace     hash  order id -> "round|request id|traceparent": what
--                         the sweeper needs to publish a lost record again
-- ARGV[1] activity id, ARGV[2] sku id,
-- ARGV[3] publish deadline (ms): how long the edge may take to learn whether
--         the order's record is in the log
-- ARGV[4] call id (unused here but in KEYS[7]'s name), ARGV[5] how long the
--         outcome is kept (ms)
-- ARGV[6], ARGV[7], ...: user id, nonce (hex, 64 random bits, from the
--         edge), request id, traceparent, admitted ("1": the edge checked
--         the buyer's admission token and claimed it): five per request,
--         decided in the order given
--
-- Returns one {code, round, order_id?, stock_left?, accepted_ms?} per
-- request, in order:
--   1 accepted, -1 SALE_NOT_FOUND, -2 SALE_NOT_ACTIVE, -3 ALREADY_PURCHASED
--   (order_id = the user's order), -4 SOLD_OUT, -5 the call was voided (by
--   an edge that gave up hearing its outcome: nothing was kept), -6 the
--   user's home is another bucket of the sale (user id mod 'of' is not
--   'home': the edge read another round's buckets), -7 a warm-up is
--   replacing the round (nothing kept; ask again), -8 the round sells only
--   with an admission from its waiting room and this request has none.
--
-- Invariant: stock never goes below zero and a user holds at most one order
-- per round (a user twice in one batch: the second is ALREADY_PURCHASED);
-- every accepted unit leaves a reservation until it is settled; a call
-- decides once (asked again, it answers what it decided, and an order
-- counts as its own only if the id ends in the request's nonce). Time is Redis's
-- own (TIME), so the window, acceptedAt and the sweeper's deadlines all read
-- one clock whatever the edges' clocks say. The nonce keeps order ids unique
-- even if Redis restarts with a counter that went back (AOF may lose the
-- last writes). A user is served by one bucket only (their home), so one
-- order per user holds across a sale's buckets as within one.
local n = (#ARGV - 5) / 5
local answers = {}
local users = {}
for i = 1, n do users[i] = ARGV[1 + 5 * i] end
local meta = redis.call('HMGET', KEYS[1], 'starts', 'ends', 'round', 'expires', 'warming', 'of', 'home', 'admission')
local round = tonumber(meta[3]) or 0
local of, home = tonumber(meta[6]) or 1, tonumber(meta[7]) or 0
local gated = meta[8] == '1'

-- user id mod `of`, digit by digit: exact for any id (Lua's numbers are
-- doubles).
local function home_of(user)
  local r = 0
  for d in string.gmatch(user, '%d') do r = (r * 10 + tonumber(d)) % of end
  return r
end

-- Asked again: the outcome, not a second deduction.
local prior = redis.call('GET', KEYS[7])
if prior then
  if prior == 'V' then
    for i = 1, n do answers[i] = {-5, round} end
    return answers
  end
  local held = redis.call('HMGET', KEYS[3], unpack(users))
  local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
  local i = 0
  for code in string.gmatch(prior, '[^,]+') do
    i = i + 1
    local c = tonumber(code)
    local nonce = ARGV[2 + 5 * i]
    -- The order this call accepted is the one whose id ends in its nonce:
    -- the user may hold another since (this one given back, then bought
    -- again by another call), and that one is not this call's.
    local own = held[i] and string.sub(held[i], -#nonce - 1) == '-' .. nonce
    if c == 1 and not own then
      -- Accepted then, its unit given back since: nothing is kept now.
      answers[i] = {-5, round}
    elseif c == 1 then
      local order_id = held[i]
      local value = redis.call('HGET', KEYS[4], order_id) or ''
      answers[i] = {1, round, order_id, stock, tonumber(string.match(value, '([^|]*)$')) or 0}
    elseif c == -3 then
      answers[i] = {-3, round, held[i]}
    else
      answers[i] = {c, round}
    end
  end
  return answers
end

-- Only a call that kept something records its outcome: one that kept
-- nothing decides afresh when asked again, which is as true.
if not meta[3] then
  for i = 1, n do answers[i] = {-1, 0} end
  return answers
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local starts = tonumber(meta[1]) or 0
local ends = tonumber(meta[2]) or 0
if (starts > 0 and now < starts) or (ends > 0 and now >= ends) then
  for i = 1, n do answers[i] = {-2, round} end
  return answers
end
if meta[5] then
  for i = 1, n do answers[i] = {-7, round} end
  return answers
end
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
local deadline = now + tonumber(ARGV[3])
-- One read of every buyer and one write per key for the whole batch: the
-- batch's own purchases are kept in `bought`, so a user twice in it is seen.
local held = redis.call('HMGET', KEYS[3], unpack(users))
local seq = tonumber(redis.call('GET', KEYS[6]) or '0')
local bought, buyers, orders, reserved, traces, codes = {}, {}, {}, {}, {}, {}
local accepted = 0
for i = 1, n do
  local user, nonce = users[i], ARGV[2 + 5 * i]
  local existing = held[i] or bought[user]
  if gated and ARGV[5 + 5 * i] ~= '1' then
    answers[i] = {-8, round}
    codes[i] = -8
  elseif of > 1 and home_of(user) ~= home then
    answers[i] = {-6, round}
    codes[i] = -6
  elseif existing then
    answers[i] = {-3, round, existing}
    codes[i] = -3
  elseif stock <= 0 then
    answers[i] = {-4, round}
    codes[i] = -4
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
    traces[at - 1], traces[at] = order_id, round .. '|' .. ARGV[3 + 5 * i] .. '|' .. ARGV[4 + 5 * i]
    answers[i] = {1, round, order_id, stock, now}
    codes[i] = 1
  end
end
if accepted > 0 then
  redis.call('HSET', KEYS[3], unpack(buyers))
  redis.call('HSET', KEYS[4], unpack(orders))
  redis.call('ZADD', KEYS[5], unpack(reserved))
  redis.call('HSET', KEYS[8], unpack(traces))
  redis.call('INCRBY', KEYS[6], accepted)
  -- DECRBY keeps the key's time to live.
  redis.call('DECRBY', KEYS[2], accepted)
  redis.call('HINCRBY', KEYS[1], 'queued', accepted)
  redis.call('SET', KEYS[7], table.concat(codes, ','), 'PX', ARGV[5])
  -- The keys this call may have created end with the sale (warmup.lua).
  local expires = tonumber(meta[4]) or 0
  if expires > 0 then
    for _, i in ipairs({ 3, 4, 5, 6, 8 }) do
      redis.call('PEXPIREAT', KEYS[i], expires)
    end
  end
end
return answers
