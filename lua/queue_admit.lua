-- queue_admit.lua: one admission pass of a sale's waiting room (keys as in
-- queue_setup.lua: KEYS[1] meta, KEYS[2] line, KEYS[3] tickets, KEYS[4]
-- users, KEYS[5] active, KEYS[6] seen, KEYS[7] log, KEYS[8] challenges,
-- KEYS[9] events).
-- Every edge runs it every `admission.tick_ms`; a pass run twice at once
-- admits no more than one would (Redis runs them one after the other, and
-- each reads what the other wrote).
--
-- ARGV[1] the orders the units still on sale can take (every bucket's stock
-- and the units in transit between buckets, read just before, over the
-- round's most units per order, rounded up: the units themselves when an
-- order holds one; 0 only when no unit is left), ARGV[2] the most tickets
-- this pass admits, ARGV[3] the rate's tolerance (ms), ARGV[4] how long
-- past its token's expiry a claimed ticket's order may still be deciding
-- (ms: the publish deadline), ARGV[5] the meta's 'used' as the caller read
-- it before the units (absent from older callers): a right spent since
-- then left `active` but may have taken its units after the caller read
-- them, so it counts as an order taken (a pass that admitted on the stale
-- figure once promoted a draw's waitlisted entry no unit was left for).
--
-- Returns {admitted now, waiting, active, stale claims}: the last a flat
-- list {ticket, user, ...} of tickets still claimed ARGV[4] ms past their
-- token's expiry, whose order was never settled (its edge died, or the
-- settling call was lost); the caller settles each by what the sale says
-- (queue_claim.lua). Sets meta 'sold_out_at' (ms) when it marks the room
-- sold out.
--
-- In order: tokens unused past their expiry leave `active` (their place
-- goes to the next ticket); no units left marks the room sold out (every
-- waiting ticket reads SOLD_OUT; joining answers it) and units back clear
-- the mark; before the start nobody is admitted. Then tickets are admitted
-- in line order while
--   - fewer than `active_buyers` are admitted and unused,
--   - fewer than `overbook` × those orders are admitted and unused, and
--   - the rate allows: a generic cell rate (GCRA) with emission interval
--     T = (60000 + tolerance) / (per_minute - 1) ms, so that no window of a
--     minute holds more than `per_minute` admissions, and none of a second
--     more than about per_minute / 60 + 1 (no burst of a minute's worth).
-- A waiting ticket not polled for `abandon` ms (counted from the start for
-- the pre-queue) is abandoned instead: it neither takes a place nor a share
-- of the rate, and comes back at the end of the line if its holder polls.
--
-- A draw's room (meta 'draw' 1, queue_draw.lua) admits nobody before its
-- draw; after it, each admission is an entry promoted from the waitlist,
-- and each admission, expiry and (once the sale is over) loss is appended
-- to KEYS[9] as an event: {type, entry, user, until, place, at}. Over, its
-- waiting entries are lost and its unused rights expired, once, 1,000
-- entries a pass (meta 'final' when all are). A draw with no end is over
-- for its waitlist once nothing can serve it any more: no unit left, no
-- right live, and the room sold out a payment window (meta 'window') and
-- ARGV[4] ago, so every order that could have given a unit back (unpaid,
-- at its deadline) has; its keys then expire a day later (the publisher
-- has told the losses by then). Once its first slice is told, a unit given
-- back later (a dead letter compensated late) promotes nobody.
local m = redis.call('HMGET', KEYS[1], 'round', 'active_buyers', 'per_minute', 'ttl', 'overbook', 'starts',
  'ends', 'closed', 'tat', 'abandon', 'admitted', 'expires', 'draw', 'drawn', 'final', 'window', 'sold_out_at',
  'final_at')
if not m[1] then
  return {0, 0, 0, {}}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local starts, ends = tonumber(m[6]), tonumber(m[7])
local draw = m[13] == '1'

-- A draw's outcome, for the edge that publishes them (queue_draw.lua).
local function event(kind, ticket, user, until_ms)
  redis.call('XADD', KEYS[9], '*', 'type', kind, 'entry', ticket, 'user', user, 'until', until_ms, 'place', 0,
    'at', now)
end

-- The draw is over: every entry still waiting has lost, every right
-- unused has expired (once; a right claimed by an order in flight is that
-- order's to settle). In slices: each pass takes the next 1,000 entries
-- (an HSCAN cursor in meta 'final_at'), so a million entries are 1,000
-- short passes; 'final' once the scan is through. Returns whether it is.
local function final_outcomes()
  local lost, expired = 0, 0
  local scan = redis.call('HSCAN', KEYS[3], redis.call('HGET', KEYS[1], 'final_at') or '0', 'COUNT', 1000)
  local all = scan[2]
  for i = 1, #all, 2 do
    local ticket, value = all[i], all[i + 1]
    local user, state, until_ms, admitted_at = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)')
    if state == 'W' then
      redis.call('HSET', KEYS[3], ticket, user .. '|L|0|0|' .. now)
      redis.call('ZREM', KEYS[2], ticket)
      event('lost', ticket, user, 0)
      lost = lost + 1
    elseif state == 'A' then
      redis.call('HSET', KEYS[3], ticket, user .. '|E|0|' .. admitted_at .. '|' .. now)
      redis.call('ZREM', KEYS[5], ticket)
      event('expired', ticket, user, until_ms)
      expired = expired + 1
    end
  end
  redis.call('HINCRBY', KEYS[1], 'lost', lost)
  redis.call('HINCRBY', KEYS[1], 'expired', expired)
  if scan[1] ~= '0' then
    redis.call('HSET', KEYS[1], 'final_at', scan[1])
    return false
  end
  redis.call('UNLINK', KEYS[2])
  redis.call('HSET', KEYS[1], 'final', 1)
  return true
end

-- The last outcomes of a draw with no end told, every slice: its keys
-- expire a day later (the publisher has told them by then).
local function final_then_expire()
  if final_outcomes() then
    local expires = now + 86400000
    redis.call('HSET', KEYS[1], 'expires', expires)
    for i = 1, #KEYS do
      redis.call('PEXPIREAT', KEYS[i], expires)
    end
  end
end

if m[8] == '1' or (ends > 0 and now >= ends) then
  redis.call('HSET', KEYS[1], 'closed', 1)
  if draw and m[15] ~= '1' then
    final_outcomes()
  end
  return {0, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[5]), {}}
end

-- Tokens past their expiry leave, but one claimed by an order in flight
-- stays until that order is decided (queue_claim.lua), or until ARGV[4]
-- more ms have passed: then it is answered as stale, for the caller.
local expired, stale = 0, {}
for _, ticket in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)) do
  local value = redis.call('HGET', KEYS[3], ticket) or ''
  local user, state, until_ms, admitted_at = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)')
  if state == 'C' then
    if (tonumber(until_ms) or 0) + tonumber(ARGV[4]) <= now then
      stale[#stale + 1] = ticket
      stale[#stale + 1] = user
    end
  else
    redis.call('HSET', KEYS[3], ticket, (user or '') .. '|E|0|' .. (admitted_at or 0) .. '|' .. now)
    redis.call('ZREM', KEYS[5], ticket)
    expired = expired + 1
    if draw then
      event('expired', ticket, user or '', until_ms or 0)
    end
  end
end
if expired > 0 then
  redis.call('HINCRBY', KEYS[1], 'expired', expired)
end

local orders = tonumber(ARGV[1])
local active = redis.call('ZCARD', KEYS[5])
-- Once a draw with no end began telling its last outcomes, its end is
-- decided: a unit given back between two slices promotes nobody (entries
-- ranked before the next in line may have been told LOST already); the
-- slices go on.
if draw and ends == 0 and m[15] ~= '1' and m[18] then
  final_then_expire()
  return {0, redis.call('ZCARD', KEYS[2]), active, stale}
end
if orders <= 0 then
  if redis.call('HGET', KEYS[1], 'sold_out') ~= '1' then
    redis.call('HSET', KEYS[1], 'sold_out', 1, 'sold_out_at', now)
  elseif draw and m[14] == '1' and ends == 0 and m[15] ~= '1' and active == 0 and tonumber(m[16] or '0') > 0
      and now >= tonumber(m[17] or now) + tonumber(m[16]) + tonumber(ARGV[4]) then
    final_then_expire()
  end
  return {0, redis.call('ZCARD', KEYS[2]), active, stale}
end
redis.call('HSET', KEYS[1], 'sold_out', 0)
if (starts > 0 and now < starts) or (draw and m[14] ~= '1') then
  return {0, redis.call('ZCARD', KEYS[2]), active, stale}
end

local per_minute, tolerance = tonumber(m[3]), tonumber(ARGV[3])
local interval = 0
if per_minute == 1 then
  interval = 60000 + tolerance + 1
elseif per_minute > 1 then
  interval = (60000 + tolerance) / (per_minute - 1)
end
local room_for = orders
if ARGV[5] then
  local spent = tonumber(redis.call('HGET', KEYS[1], 'used') or '0') - tonumber(ARGV[5])
  room_for = math.max(orders - math.max(spent, 0), 0)
end
local cap = math.min(tonumber(m[2]), math.floor(tonumber(m[5]) * room_for))
local ttl, abandon = tonumber(m[4]), tonumber(m[10])
local seen_since = now - abandon
local tat, total = tonumber(m[9]), tonumber(m[11])
local admitted, abandoned, most = 0, 0, tonumber(ARGV[2])
while admitted < most and abandoned < 1000 and active < cap and (interval == 0 or tat - now <= tolerance) do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #first == 0 then
    break
  end
  local ticket = first[1]
  redis.call('ZREM', KEYS[2], ticket)
  local seen = tonumber(redis.call('ZSCORE', KEYS[6], ticket) or '0')
  redis.call('ZREM', KEYS[6], ticket)
  local user = string.match(redis.call('HGET', KEYS[3], ticket) or '', '^([^|]*)') or ''
  if math.max(seen, starts) < seen_since then
    redis.call('HSET', KEYS[3], ticket, user .. '|X|0|0|' .. now)
    abandoned = abandoned + 1
  else
    redis.call('HSET', KEYS[3], ticket, user .. '|A|' .. (now + ttl) .. '|' .. now .. '|0')
    redis.call('ZADD', KEYS[5], now + ttl, ticket)
    -- Scored in microseconds-ish, now * 1000 + the admission's number mod
    -- 1000: ordered by admission within one millisecond too.
    redis.call('ZADD', KEYS[7], now * 1000 + total % 1000, ticket .. ':' .. total)
    admitted, active, total = admitted + 1, active + 1, total + 1
    if draw then
      event('promoted', ticket, user, now + ttl)
    end
    if interval > 0 then
      tat = math.max(tat, now) + interval
    end
  end
end
redis.call('HSET', KEYS[1], 'tat', tat, 'admitted', total)
if abandoned > 0 then
  redis.call('HINCRBY', KEYS[1], 'abandoned', abandoned)
end
if draw and admitted > 0 then
  redis.call('HINCRBY', KEYS[1], 'promoted', admitted)
end
local expires = tonumber(m[12])
if admitted > 0 and expires > 0 then
  for _, i in ipairs({ 5, 7 }) do
    redis.call('PEXPIREAT', KEYS[i], expires)
  end
end
return {admitted, redis.call('ZCARD', KEYS[2]), active, stale}
