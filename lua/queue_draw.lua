-- queue_draw.lua: a draw's entries and the draw itself, on the waiting
-- room's keys (as in queue_setup.lua: KEYS[1] meta, KEYS[2] line, KEYS[3]
-- tickets, KEYS[4] users, KEYS[5] active, KEYS[6] seen, KEYS[7] log,
-- KEYS[8] challenges, KEYS[9] events). An entry is a ticket: waiting ('W')
-- until the draw, then admitted ('A': it won, its token lets it order until
-- its expiry), or waiting in the line by its rank (the waitlist); an entry
-- promoted later is admitted by queue_admit.lua; one whose right lapsed is
-- expired ('E'), one still waiting when the sale ended is lost ('L').
--
-- ARGV[1] 'enter': ARGV[2] user, ARGV[3] a new entry id (used only if the
--   user holds none this round), ARGV[4] the proof-of-work challenge's nonce
--   ('' when none is asked), ARGV[5] its expiry (ms). Entries are taken from
--   the start of the pre-queue (entriesOpenAt) to the room's start (drawAt),
--   and never once the draw froze them, nor once the draw holds its most
--   entries (meta 'max_entries', 0: no bound): 'ENTRIES_FULL', nothing
--   written (a user holding an entry still reads it).
-- ARGV[1] 'read': ARGV[2] the entry id.
--   Both return {status, entry, user, until_ms, place, round, opens_ms,
--   used}: 'ENTERED', 'WON' (until_ms: its token's expiry; used 1: it
--   placed its order), 'WAITLISTED' (place from 1), 'EXPIRED', 'LOST',
--   'NOT_OPEN' (entries open at opens_ms), 'DRAW_CLOSED' (entries closed and
--   the user holds none: nothing written), 'NO_DRAW' (the sale has no
--   draw), 'UNKNOWN' (no such entry), 'REPLAYED' (the challenge was used).
-- ARGV[1] 'freeze': from the draw's time on (Redis's clock), no entry is
--   taken any more. Returns 1 frozen (now or before), 0 too early, -1 no
--   draw to make (none, made already, or the sale closed first).
-- ARGV[1] 'apply': one slice of the draw, so that no call holds Redis
--   long whatever the entries (a million in about 500 slices): ARGV[5] the
--   maker's lease fence (a maker of an older term than the last that acted
--   on the draw is refused: -3, nothing written), ARGV[2] the winners (the
--   orders the units left can serve), ARGV[3] the entry list's digest,
--   ARGV[4] the entries the caller ranked, ARGV[6] the seed the caller
--   ranked by (revealed with the draw: until then Redis holds only its
--   commitment; '' from callers whose seed was in Redis already), ARGV[7]
--   the rank this slice starts at (from 0), ARGV[8] the slice's size (absent:
--   every entry, as older callers ask). The line must hold every entry,
--   ranked (the caller wrote it, score = rank from 0). The first slice fixes
--   the winners and the digest (meta 'apply_winners', 'apply_digest'); every
--   slice admits the winners among its entries (each a 'won' event) and
--   tells the others their place (a 'waitlisted' event), and moves meta
--   'apply_at'; the last makes the draw (the winners leave the line, the
--   seed is revealed, 'drawn'). Returns 1 drawn now, 0 drawn before, 2 a
--   slice done and more to do (ARGV[7] not the next slice: nothing done,
--   ask from meta 'apply_at'), -1 the sale closed first, -2 the line does
--   not hold every entry or another list was begun (the caller ranks
--   again).
-- ARGV[1] 'published': ARGV[2] the last outcome (a stream id) on the topic,
--   ARGV[3] how many the publisher sent up to it, ARGV[4] its lease's fence.
--   Moves the publisher's cursor. Returns 1, or -3 when a publisher of a
--   later term moved it (this one's term is over: nothing written).
local m = redis.call('HMGET', KEYS[1], 'round', 'starts', 'prequeue', 'closed', 'ends', 'draw', 'drawn', 'frozen',
  'ttl', 'expires', 'admitted', 'max_entries', 'joined')
if not m[1] or m[6] ~= '1' then
  return {'NO_DRAW', '', '', 0, 0, 0, 0, 0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local round, starts, ends = tonumber(m[1]), tonumber(m[2]), tonumber(m[5])
local opens = starts - tonumber(m[3])
local closed = m[4] == '1' or (ends > 0 and now >= ends)
local drawn = m[7] == '1'
local expires = tonumber(m[10])

local function reply(status, ticket, user, until_ms, place, used)
  return {status, ticket or '', user or '', until_ms or 0, place or 0, round, opens, used or 0}
end

local function event(kind, ticket, user, until_ms, place)
  redis.call('XADD', KEYS[9], '*', 'type', kind, 'entry', ticket, 'user', user, 'until', until_ms, 'place', place,
    'at', now)
end

-- What an entry reads now.
local function answer(ticket)
  local value = redis.call('HGET', KEYS[3], ticket)
  if not value then
    return reply('UNKNOWN', ticket)
  end
  local user, state, until_ms = string.match(value, '^([^|]*)|([^|]*)|([^|]*)')
  until_ms = tonumber(until_ms)
  if state == 'W' and closed then
    return reply('LOST', ticket, user)
  elseif state == 'W' and drawn then
    return reply('WAITLISTED', ticket, user, 0, (redis.call('ZRANK', KEYS[2], ticket) or 0) + 1)
  elseif state == 'W' then
    return reply('ENTERED', ticket, user)
  elseif state == 'U' then
    return reply('WON', ticket, user, until_ms, 0, 1)
  elseif state == 'C' or (state == 'A' and until_ms > now and not closed) then
    return reply('WON', ticket, user, until_ms)
  elseif state == 'L' then
    return reply('LOST', ticket, user)
  end
  -- Expired, or admitted past its token's expiry (the next pass records it).
  return reply('EXPIRED', ticket, user, until_ms)
end

if ARGV[1] == 'read' then
  return answer(ARGV[2])
elseif ARGV[1] == 'enter' then
  local user = ARGV[2]
  local held = redis.call('HGET', KEYS[4], user)
  if held then
    return answer(held)
  end
  if now < opens then
    return reply('NOT_OPEN')
  end
  if closed or m[8] == '1' or now >= starts then
    return reply('DRAW_CLOSED')
  end
  local most = tonumber(m[12] or '0') or 0
  if most > 0 and (tonumber(m[13] or '0') or 0) >= most then
    return reply('ENTRIES_FULL')
  end
  if ARGV[4] ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
    if redis.call('ZADD', KEYS[8], 'NX', ARGV[5], ARGV[4]) == 0 then
      return reply('REPLAYED')
    end
  end
  local ticket = ARGV[3]
  redis.call('HSET', KEYS[3], ticket, user .. '|W|0|0|0')
  redis.call('HSET', KEYS[4], user, ticket)
  redis.call('HINCRBY', KEYS[1], 'joined', 1)
  if expires > 0 then
    for _, i in ipairs({ 3, 4, 8 }) do
      redis.call('PEXPIREAT', KEYS[i], expires)
    end
  end
  return answer(ticket)
elseif ARGV[1] == 'published' then
  if tonumber(ARGV[4]) < tonumber(redis.call('HGET', KEYS[1], 'published_fence') or '0') then
    return -3
  end
  redis.call('HSET', KEYS[1], 'published', ARGV[2], 'published_fence', ARGV[4])
  redis.call('HINCRBY', KEYS[1], 'published_count', ARGV[3])
  return 1
elseif ARGV[1] == 'freeze' then
  if drawn or closed then
    return -1
  end
  if now < starts and m[8] ~= '1' then
    return 0
  end
  redis.call('HSET', KEYS[1], 'frozen', 1)
  return 1
end

-- apply
if drawn then
  return 0
end
if closed then
  return -1
end
-- A maker of an older term of the draws' lease (frozen past it) makes
-- nothing once a later term acted on this draw (its cursor, or a try of
-- its own): the term is stamped before anything is written.
if tonumber(ARGV[5] or '0') < tonumber(redis.call('HGET', KEYS[1], 'published_fence') or '0') then
  return -3
end
redis.call('HSET', KEYS[1], 'published_fence', ARGV[5] or '0')
local entries = redis.call('HLEN', KEYS[3])
if redis.call('ZCARD', KEYS[2]) ~= entries or tonumber(ARGV[4]) ~= entries then
  return -2
end
local a = redis.call('HMGET', KEYS[1], 'apply_at', 'apply_winners', 'apply_digest')
local from = tonumber(ARGV[7] or '0')
local at = tonumber(a[1] or '0') or 0
if a[3] and a[3] ~= ARGV[3] then
  return -2
end
if from ~= at then
  return 2
end
local winners = tonumber(a[2] or ARGV[2])
if not a[2] then
  redis.call('HSET', KEYS[1], 'apply_winners', winners, 'apply_digest', ARGV[3])
end
local size = tonumber(ARGV[8] or entries)
local ttl, total = tonumber(m[9]), tonumber(m[11])
local slice = redis.call('ZRANGE', KEYS[2], from, from + size - 1)
for i, ticket in ipairs(slice) do
  local rank = from + i
  local user = string.match(redis.call('HGET', KEYS[3], ticket), '^([^|]*)')
  if rank <= winners then
    redis.call('HSET', KEYS[3], ticket, user .. '|A|' .. (now + ttl) .. '|' .. now .. '|0')
    redis.call('ZADD', KEYS[5], now + ttl, ticket)
    redis.call('ZADD', KEYS[7], now * 1000 + total % 1000, ticket .. ':' .. total)
    total = total + 1
    event('won', ticket, user, now + ttl, rank)
  else
    event('waitlisted', ticket, user, 0, rank - winners)
  end
end
at = from + #slice
redis.call('HSET', KEYS[1], 'apply_at', at, 'admitted', total)
if at < entries then
  return 2
end
if winners > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, winners - 1)
end
redis.call('HSET', KEYS[1], 'drawn', 1, 'drawn_at', now, 'digest', ARGV[3], 'winners', math.min(winners, entries))
if (ARGV[6] or '') ~= '' then
  redis.call('HSET', KEYS[1], 'seed', ARGV[6])
end
if expires > 0 then
  for i = 1, #KEYS do
    redis.call('PEXPIREAT', KEYS[i], expires)
  end
end
return 1
