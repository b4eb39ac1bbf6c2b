-- follow_created.lua: mark orders CREATED once PostgreSQL committed their
-- rows, and clear their reservations, for one sale.
--
-- KEYS[1] meta (the status counters), KEYS[2] orders, KEYS[3] reserved,
-- KEYS[4] trace (what a republish needs: no longer, once written),
-- KEYS[5] stock, KEYS[6] buyers, KEYS[7] held (users' places)
-- ARGV: order id, user id, accepted (ms), quantity, slot, repeated for every
-- order
--
-- Returns how many orders changed status.
--
-- Invariant: the counters queued / created / failed stay equal to the
-- statuses in the orders hash: each order moves from the status it had. An
-- order the hash does not hold (another round's, or one Redis lost) is not
-- added: its status is PostgreSQL's to tell. An order Redis had FAILED
-- (undone by the edge, its units given back) that PostgreSQL wrote CREATED
-- takes its units again, and its buyer and place if free.
-- (The edge undoes an order only before its publish deadline and the
-- sweeper publishes one again only after it, so this is the fallback of a
-- clock that jumped, not a path of the sale.)
--
-- The caller sends a batch's orders in slices of a hundred or so (each
-- call holds Redis about a millisecond: shared/src/stock/follow_created.rs);
-- within a call, the reads, writes and removals go in variadic commands of
-- up to CHUNK orders, the counters move once.
local CHUNK = 1000
local n = #ARGV / 5
local moved = { queued = 0, failed = 0, queued_extra = 0 }
local taken = 0
local changed = 0
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit') or '1')
for first = 1, n, CHUNK do
  local last = math.min(first + CHUNK - 1, n)
  local ids = {}
  for i = first, last do
    ids[#ids + 1] = ARGV[5 * i - 4]
  end
  local old = redis.call('HMGET', KEYS[2], unpack(ids))
  local statuses = {}
  for j = 1, #ids do
    local value = old[j]
    -- The first letter says the status: Q(UEUED), F(AILED), or C for
    -- CREATED and CANCELLED alike: an order already created (and perhaps
    -- cancelled since, its unit given back) is left as it is.
    local letter = value and string.sub(value, 1, 1)
    if letter and letter ~= 'C' then
      local i = first + j - 1
      local user, quantity = ARGV[5 * i - 3], tonumber(ARGV[5 * i - 1])
      if letter == 'Q' then
        moved.queued = moved.queued + 1
        moved.queued_extra = moved.queued_extra + quantity - 1
      else
        moved.failed = moved.failed + 1
        taken = taken + quantity
        redis.call('HSETNX', KEYS[6], user, ids[j])
        if limit > 1 then
          redis.call('HSETNX', KEYS[7], user .. '/' .. ARGV[5 * i], ids[j] .. '|' .. quantity)
        end
      end
      statuses[#statuses + 1] = ids[j]
      statuses[#statuses + 1] = 'CREATED|' .. user .. '||' .. ARGV[5 * i - 2]
    end
  end
  if #statuses > 0 then
    redis.call('HSET', KEYS[2], unpack(statuses))
    changed = changed + #statuses / 2
  end
  redis.call('ZREM', KEYS[3], unpack(ids))
  redis.call('HDEL', KEYS[4], unpack(ids))
end
-- HINCRBY refuses "-0": only counters that moved are touched.
for status, count in pairs(moved) do
  if count > 0 then
    redis.call('HINCRBY', KEYS[1], status, -count)
  end
end
if changed > 0 then
  redis.call('HINCRBY', KEYS[1], 'created', changed)
end
if taken > 0 then
  -- DECRBY keeps the key's time to live.
  redis.call('DECRBY', KEYS[5], taken)
end
return changed
