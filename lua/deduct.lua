-- deduct.lua: the whole flash-sale decision for a batch of requests of one
-- sale, atomically, each decided exactly as if it ran alone, in order; and
-- the batch's outcome kept for a while under its call id, so an edge that
-- did not hear the answer (a timeout, a dropped connection) asks again with
-- the same id and hears the outcome instead of deducting twice.
--
-- KEYS[1] meta      hash  total, starts (ms, 0 = none), ends (ms, 0 = none),
--                         round, the counters queued / created / failed
--                         (orders) and queued_extra (the units of QUEUED
--                         orders beyond one each), 'limit' (units one user
--                         may hold in the round) and 'max' (units one order
--                         may hold), both 1 when absent, and of a sale in
--                         buckets: how many ('of'), this one's place
--                         ('home'), and 'warming' while a warm-up replaces
--                         the round
-- KEYS[2] stock     string, units left
-- KEYS[3] buyers    hash  user id -> order id (with a limit above one: the
--                         user's latest)
-- KEYS[4] orders    hash  order id -> "STATUS|user|reason|accepted_ms"
-- KEYS[5] reserved  zset  order id scored by when it may be swept: the time
--                         after which its record cannot land any more
-- KEYS[6] seq       string, per-sale order counter (never reset while the
--                   sale lives)
-- KEYS[7] call      string, this call's outcome when it kept something
--                         ("V": voided; else one entry per request: its
--                         order id when accepted, else its code), kept
--                         ARGV[5] ms
-- KEYS[8] trace     hash  order id -> "round|request id|traceparent|
--                         quantity|slot": what the sweeper needs to publish
--                         a lost record again
-- KEYS[9] held      hash  with a limit above one: "user/slot" -> "order
--                         id|quantity" for each of the user's places a live
--                         order holds (a place is freed when its order gives
--                         its units back)
-- ARGV[1] activity id, ARGV[2] sku id,
-- ARGV[3] publish deadline (ms): how long the edge may take to learn whether
--         the order's record is in the log
-- ARGV[4] call id (unused here but in KEYS[7]'s name), ARGV[5] how long the
--         outcome is kept (ms)
-- ARGV[6], ARGV[7], ...: user id, nonce (hex, 64 random bits, from the
--         edge), request id, traceparent, admitted ("1": the edge checked
--         the buyer's admission token and claimed it), quantity: six per
--         request, decided in the order given
--
-- Returns one string: the round, then one entry per request, in order,
-- each after a comma ("7,1:9-1-12-a1b2c3d4e5f60718:0:1733512345678:0,-4:0"),
-- an entry's code first and its fields after colons (one string to parse,
-- not a nested array per request: shared/src/stock/deduct.rs):
--   1 accepted "1:order_id:slot:accepted_ms:stock_left",
--   -1 SALE_NOT_FOUND, -2 SALE_NOT_ACTIVE, -3 ALREADY_PURCHASED "-3:order_id"
--   (a limit of one: the user's order), -4 SOLD_OUT "-4:n" (the units left:
--   fewer than asked), -5 the call was voided (by an edge that gave up
--   hearing its outcome: nothing was kept), -6 the user's home is another
--   bucket of the sale (user id mod 'of' is not 'home': the edge read
--   another round's buckets), -7 a warm-up is replacing the round (nothing
--   kept; ask again), -8 the round sells only with an admission from its
--   waiting room and this request has none, -9 LIMIT_REACHED "-9:held:limit"
--   (the units the user holds, the limit), -10 the quantity is above the
--   round's 'max' "-10:max".
--
-- Invariant: stock never goes below zero and a user holds at most 'limit'
-- units per round, in live orders of at least one unit each, one per place
-- (with a limit of one: one order, place 0; a user twice in one batch: the
-- second is ALREADY_PURCHASED); an order takes all its units or none;
-- every accepted order leaves a reservation until it is settled; a call
-- decides once (asked again, it answers what it decided, and an order
-- counts as its own only while it still holds its units). Time is Redis's
-- own (TIME), so the window, acceptedAt and the sweeper's deadlines all read
-- one clock whatever the edges' clocks say. The nonce keeps order ids unique
-- even if Redis restarts with a counter that went back (AOF may lose the
-- last writes). A user is served by one bucket only (their home), so the
-- limit holds across a sale's buckets as within one.
local n = (#ARGV - 5) / 6
local answers = {}
local users = {}
for i = 1, n do users[i] = ARGV[6 * i] end
local meta = redis.call('HMGET', KEYS[1], 'starts', 'ends', 'round', 'expires', 'warming', 'of', 'home', 'admission',
  'limit', 'max')
local round = tonumber(meta[3]) or 0
local of, home = tonumber(meta[6]) or 1, tonumber(meta[7]) or 0
local gated = meta[8] == '1'
local limit, max = tonumber(meta[9]) or 1, tonumber(meta[10]) or 1

-- user id mod `of`, digit by digit: exact for any id (Lua's numbers are
-- doubles).
local function home_of(user)
  local r = 0
  for d in string.gmatch(user, '%d') do r = (r * 10 + tonumber(d)) % of end
  return r
end

-- With a limit above one: the user's places, as held (slot -> "order
-- id|quantity"), read once per user per call and kept up to date by the
-- batch's own purchases.
local places = {}
local function places_of(user)
  if not places[user] then
    local fields = {}
    for slot = 0, limit - 1 do fields[slot + 1] = user .. '/' .. slot end
    local values = redis.call('HMGET', KEYS[9], unpack(fields))
    local own = {}
    for slot = 0, limit - 1 do own[slot] = values[slot + 1] or nil end
    places[user] = own
  end
  return places[user]
end
local function units_held(own)
  local units = 0
  for slot = 0, limit - 1 do
    if own[slot] then units = units + tonumber(string.match(own[slot], '|(%d+)$')) end
  end
  return units
end

-- The answer: the round, then every request's entry.
local function reply()
  return round .. ',' .. table.concat(answers, ',')
end

-- Asked again: the outcome, not a second deduction.
local prior = redis.call('GET', KEYS[7])
if prior then
  if prior == 'V' then
    for i = 1, n do answers[i] = '-5' end
    return reply()
  end
  local held = redis.call('HMGET', KEYS[3], unpack(users))
  local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
  local i = 0
  for entry in string.gmatch(prior, '[^,]+') do
    i = i + 1
    local c = tonumber(entry)
    if not c then
      -- Accepted then: still the user's while it holds its units (a limit
      -- of one: while it is the user's order; given back, the user may
      -- hold another since, which is not this call's).
      local value = redis.call('HGET', KEYS[4], entry) or ''
      local slot = 0
      local own
      if limit == 1 then
        own = held[i] == entry
      else
        own = string.sub(value, 1, 7) == 'QUEUED|' or string.sub(value, 1, 8) == 'CREATED|'
        local mine = places_of(users[i])
        for s = 0, limit - 1 do
          if mine[s] and string.sub(mine[s], 1, #entry + 1) == entry .. '|' then slot = s end
        end
      end
      if own then
        answers[i] = '1:' .. entry .. ':' .. slot .. ':' .. (string.match(value, '([^|]*)$') or '0') .. ':' .. stock
      else
        answers[i] = '-5'
      end
    elseif c == 1 then
      -- As the script before quantities kept it: the order is the one
      -- whose id ends in the request's nonce, while it is the user's.
      local nonce = ARGV[1 + 6 * i]
      if held[i] and string.sub(held[i], -#nonce - 1) == '-' .. nonce then
        local value = redis.call('HGET', KEYS[4], held[i]) or ''
        answers[i] = '1:' .. held[i] .. ':0:' .. (string.match(value, '([^|]*)$') or '0') .. ':' .. stock
      else
        answers[i] = '-5'
      end
    elseif c == -3 then
      answers[i] = '-3:' .. (held[i] or '')
    elseif c == -4 then
      answers[i] = '-4:' .. stock
    elseif c == -9 then
      answers[i] = '-9:' .. units_held(places_of(users[i])) .. ':' .. limit
    elseif c == -10 then
      answers[i] = '-10:' .. max
    else
      answers[i] = entry
    end
  end
  return reply()
end

-- Only a call that kept something records its outcome: one that kept
-- nothing decides afresh when asked again, which is as true.
if not meta[3] then
  for i = 1, n do answers[i] = '-1' end
  return reply()
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local starts = tonumber(meta[1]) or 0
local ends = tonumber(meta[2]) or 0
if (starts > 0 and now < starts) or (ends > 0 and now >= ends) then
  for i = 1, n do answers[i] = '-2' end
  return reply()
end
if meta[5] then
  for i = 1, n do answers[i] = '-7' end
  return reply()
end
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
local deadline = now + tonumber(ARGV[3])
-- One read of every buyer and one write per key for the whole batch: the
-- batch's own purchases are kept in `bought`, so a user twice in it is seen.
local held = redis.call('HMGET', KEYS[3], unpack(users))
local seq = tonumber(redis.call('GET', KEYS[6]) or '0')
local bought, buyers, orders, reserved, traces, places_taken, codes = {}, {}, {}, {}, {}, {}, {}
local accepted, units, extra = 0, 0, 0
for i = 1, n do
  local user, nonce, quantity = users[i], ARGV[1 + 6 * i], tonumber(ARGV[5 + 6 * i])
  local existing = limit == 1 and (held[i] or bought[user])
  local own = limit > 1 and places_of(user)
  local units_own = own and units_held(own)
  if gated and ARGV[4 + 6 * i] ~= '1' then
    answers[i] = '-8'
    codes[i] = -8
  elseif of > 1 and home_of(user) ~= home then
    answers[i] = '-6'
    codes[i] = -6
  elseif quantity > max then
    answers[i] = '-10:' .. max
    codes[i] = -10
  elseif existing then
    answers[i] = '-3:' .. existing
    codes[i] = -3
  elseif own and units_own + quantity > limit then
    answers[i] = '-9:' .. units_own .. ':' .. limit
    codes[i] = -9
  elseif stock < quantity then
    answers[i] = '-4:' .. stock
    codes[i] = -4
  else
    stock = stock - quantity
    accepted = accepted + 1
    units = units + quantity
    extra = extra + quantity - 1
    seq = seq + 1
    local order_id = ARGV[1] .. '-' .. ARGV[2] .. '-' .. seq .. '-' .. nonce
    local slot = 0
    if own then
      -- The first free place: there is one, as every live order holds a
      -- unit and the user holds fewer than `limit`.
      while own[slot] do slot = slot + 1 end
      own[slot] = order_id .. '|' .. quantity
      places_taken[#places_taken + 1] = user .. '/' .. slot
      places_taken[#places_taken + 1] = own[slot]
    end
    bought[user] = order_id
    local at = 2 * accepted
    buyers[at - 1], buyers[at] = user, order_id
    orders[at - 1], orders[at] = order_id, 'QUEUED|' .. user .. '||' .. now
    reserved[at - 1], reserved[at] = deadline, order_id
    traces[at - 1], traces[at] = order_id,
      round .. '|' .. ARGV[2 + 6 * i] .. '|' .. ARGV[3 + 6 * i] .. '|' .. quantity .. '|' .. slot
    answers[i] = '1:' .. order_id .. ':' .. slot .. ':' .. now .. ':' .. stock
    codes[i] = order_id
  end
end
if accepted > 0 then
  redis.call('HSET', KEYS[3], unpack(buyers))
  redis.call('HSET', KEYS[4], unpack(orders))
  redis.call('ZADD', KEYS[5], unpack(reserved))
  redis.call('HSET', KEYS[8], unpack(traces))
  if #places_taken > 0 then
    redis.call('HSET', KEYS[9], unpack(places_taken))
  end
  redis.call('INCRBY', KEYS[6], accepted)
  -- DECRBY keeps the key's time to live.
  redis.call('DECRBY', KEYS[2], units)
  redis.call('HINCRBY', KEYS[1], 'queued', accepted)
  if extra > 0 then
    redis.call('HINCRBY', KEYS[1], 'queued_extra', extra)
  end
  redis.call('SET', KEYS[7], table.concat(codes, ','), 'PX', ARGV[5])
  -- The keys this call may have created end with the sale (warmup.lua).
  local expires = tonumber(meta[4]) or 0
  if expires > 0 then
    for _, i in ipairs({ 3, 4, 5, 6, 8, 9 }) do
      redis.call('PEXPIREAT', KEYS[i], expires)
    end
  end
end
return reply()
