-- queue_ticket.lua: a buyer joins a sale's waiting room, or reads their
-- ticket (keys as in queue_setup.lua: KEYS[1] meta, KEYS[2] line, KEYS[3]
-- tickets, KEYS[4] users, KEYS[5] active, KEYS[6] seen, KEYS[7] log,
-- KEYS[8] challenges).
--
-- ARGV[1] 'join': ARGV[2] user, ARGV[3] a new ticket id (used only if the
--   user holds none this round), ARGV[4] the proof-of-work challenge's nonce
--   ('' when the room asks none), ARGV[5] its expiry (ms).
-- ARGV[1] 'poll': ARGV[2] the ticket.
--
-- Returns {status, ticket, user, place, expires_ms, round, opens_ms,
-- admitted_last_minute, admit_per_minute}: status 'WAITING' (place: 0 before the start, when
-- nobody has a place yet), 'ADMITTED' (expires_ms: the token's end),
-- 'SOLD_OUT', 'CLOSED', 'NOT_OPEN' (the pre-queue opens at opens_ms),
-- 'NO_ROOM' (the sale has none, or a draw instead), 'UNKNOWN' (no such ticket), 'REPLAYED'
-- (the challenge was used before).
--
-- Fair order: a ticket taken before the start is placed by a hash of the
-- room's secret seed and the ticket (a uniformly random order, fixed at
-- the start, that no buyer can compute); one taken after, first come first
-- served behind every one of them. A ticket whose token expired unused, or
-- that was abandoned, goes to the back of the line when its holder comes
-- back. Time is Redis's own.
local m = redis.call('HMGET', KEYS[1], 'round', 'starts', 'ends', 'prequeue', 'seed', 'sold_out', 'closed', 'expires',
  'per_minute', 'draw')
-- A draw's room is entered and read through queue_draw.lua alone.
if not m[1] or m[10] == '1' then
  return {'NO_ROOM', '', '', 0, 0, 0, 0, 0, 0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local round, starts, ends = m[1], tonumber(m[2]), tonumber(m[3])
local opens = starts > 0 and starts - tonumber(m[4]) or 0
local closed = m[7] == '1' or (ends > 0 and now >= ends)
local expires = tonumber(m[8])
local recent = redis.call('ZCOUNT', KEYS[7], (now - 60000) * 1000, '+inf')
local BACK = 4503599627370496 -- 2^52: every place after the start is behind every shuffled one

local function reply(status, ticket, user, place, until_ms)
  return {status, ticket or '', user or '', place or 0, until_ms or 0, tonumber(round), opens, recent,
    tonumber(m[9])}
end

local function back_of_line(ticket, user)
  local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('ZADD', KEYS[2], BACK + seq, ticket)
  redis.call('HSET', KEYS[3], ticket, user .. '|W|0|0|0')
end

local function touched()
  if expires > 0 then
    for _, i in ipairs({ 2, 3, 4, 6, 8 }) do
      redis.call('PEXPIREAT', KEYS[i], expires)
    end
  end
end

-- What a ticket reads now.
local function answer(ticket)
  local value = redis.call('HGET', KEYS[3], ticket)
  if not value then
    return reply('UNKNOWN', ticket)
  end
  local user, state, until_ms = string.match(value, '^([^|]*)|([^|]*)|([^|]*)')
  until_ms = tonumber(until_ms)
  if closed then
    return reply('CLOSED', ticket, user)
  end
  if state == 'A' and until_ms <= now then
    -- Expired, not yet seen by an admission pass: its place goes on.
    redis.call('ZREM', KEYS[5], ticket)
    redis.call('HINCRBY', KEYS[1], 'expired', 1)
    state = 'E'
  end
  if state == 'A' or state == 'C' or state == 'U' then
    return reply('ADMITTED', ticket, user, 0, until_ms)
  end
  if state == 'E' or state == 'X' then
    back_of_line(ticket, user)
    touched()
  end
  if m[6] == '1' then
    return reply('SOLD_OUT', ticket, user)
  end
  redis.call('ZADD', KEYS[6], now, ticket)
  if starts > 0 and now < starts then
    return reply('WAITING', ticket, user, 0)
  end
  return reply('WAITING', ticket, user, redis.call('ZRANK', KEYS[2], ticket) + 1)
end

if ARGV[1] == 'poll' then
  return answer(ARGV[2])
end

local user = ARGV[2]
if starts > 0 and now < opens then
  return reply('NOT_OPEN')
end
if closed then
  return reply('CLOSED')
end
if ARGV[4] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
  if redis.call('ZADD', KEYS[8], 'NX', ARGV[5], ARGV[4]) == 0 then
    return reply('REPLAYED')
  end
end
local held = redis.call('HGET', KEYS[4], user)
if held then
  touched()
  return answer(held)
end
if m[6] == '1' then
  return reply('SOLD_OUT')
end
local ticket = ARGV[3]
redis.call('HINCRBY', KEYS[1], 'joined', 1)
if starts > 0 and now < starts then
  -- 52 bits of SHA-1(seed, ticket): exact in a double.
  local place = tonumber(string.sub(redis.sha1hex(m[5] .. ':' .. ticket), 1, 13), 16)
  redis.call('ZADD', KEYS[2], place, ticket)
  redis.call('HSET', KEYS[3], ticket, user .. '|W|0|0|0')
else
  back_of_line(ticket, user)
end
redis.call('HSET', KEYS[4], user, ticket)
touched()
return answer(ticket)
