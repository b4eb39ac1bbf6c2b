-- queue_claim.lua: an admission token used for one order, at most once
-- (of queue_setup.lua's keys, this script takes four: KEYS[1] meta,
-- KEYS[2] tickets, KEYS[3] active, KEYS[4] events).
--
-- ARGV[1] 'claim' | 'spend' | 'release', ARGV[2] the ticket, ARGV[3] the
-- user, ARGV[4] the round the token names.
--
-- claim (before the deduction): 1 the ticket is the user's, of this round,
--   admitted and unexpired — it is now claimed (a second order with it is
--   refused; it still counts as active until its order is decided); 0
--   used, or claimed by an order in flight; -1 expired; -2 not this user's,
--   not this round's, or unknown.
-- spend (the order was accepted): the claim becomes a use, no longer
--   active. Returns 1.
-- release (the order kept nothing): the ticket is admitted again until its
--   token's expiry (or expired, past it, or once the sale is closed; in a
--   draw's room the expiry is an event, as queue_admit.lua appends). Returns 1.
local round = redis.call('HGET', KEYS[1], 'round')
local value = redis.call('HGET', KEYS[2], ARGV[2])
if not round or round ~= ARGV[4] or not value then
  return -2
end
local user, state, until_ms, admitted_at = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)')
if user ~= ARGV[3] then
  return -2
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function set(to, ended)
  redis.call('HSET', KEYS[2], ARGV[2], user .. '|' .. to .. '|' .. until_ms .. '|' .. admitted_at .. '|' .. ended)
end
if ARGV[1] == 'claim' then
  if state == 'C' or state == 'U' then
    return 0
  end
  if state ~= 'A' or tonumber(until_ms) <= now then
    return -1
  end
  set('C', now)
  return 1
end
if state ~= 'C' then
  return 1
end
if ARGV[1] == 'spend' then
  set('U', now)
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'used', 1)
elseif tonumber(until_ms) > now and redis.call('HGET', KEYS[1], 'closed') ~= '1' then
  set('A', 0)
else
  set('E', now)
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'expired', 1)
  if redis.call('HGET', KEYS[1], 'draw') == '1' then
    redis.call('XADD', KEYS[4], '*', 'type', 'expired', 'entry', ARGV[2], 'user', user, 'until', until_ms, 'place', 0,
      'at', now)
  end
end
return 1
