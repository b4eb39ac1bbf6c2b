-- queue_setup.lua: a sale's waiting room opened for a round, closed, or
-- taken away (a round without one).
--
-- KEYS[1] meta (hash: the room's settings, its counters, the shuffle's
-- seed and the admission rate's state), KEYS[2] line (zset: the waiting
-- tickets, by place), KEYS[3] tickets (hash: ticket ->
-- "user|state|expires_ms|admitted_ms|ended_ms"), KEYS[4] users (hash: user ->
-- ticket), KEYS[5] active (zset: admitted tickets not yet used, by expiry),
-- KEYS[6] seen (zset: waiting tickets, by their last poll), KEYS[7] log
-- (zset: every admission "ticket:number", by time ms × 1000 + number mod 1000), KEYS[8] challenges (zset: proof-of-work
-- nonces used, by expiry), KEYS[9] events (stream: a draw's outcomes, each
-- an entry's, for the edge that publishes them) — all in the sale's own slot.
--
-- ARGV[1] 'open': ARGV[2] round, ARGV[3] active buyers, ARGV[4] admissions
--   per minute (0: unlimited), ARGV[5] pre-queue (ms), ARGV[6] token time to
--   live (ms), ARGV[7] overbook, ARGV[8] proof-of-work bits (0: none),
--   ARGV[9] starts (ms, 0: none), ARGV[10] ends (ms, 0: none), ARGV[11] the
--   shuffle's seed (for a draw: the commitment to its seed, which is kept
--   out of Redis until the draw reveals it), ARGV[12] when every key expires (ms, 0: never), ARGV[13]
--   a waiting ticket not polled this long is abandoned (ms), ARGV[14] 1: a
--   draw's room (queue_draw.lua: its joins are entries, nobody is admitted
--   before the draw, its outcomes are events), 0: a waiting room, ARGV[15]
--   a draw's most entries (0: no bound; absent from older callers),
--   ARGV[16] the sale's payment window (ms; 0 or absent: unknown), after
--   which no unpaid order can give a unit back to a sold-out draw.
--   Returns 1 opened, 2 open for this round already (left as it is: a
--   warm-up run again must not reshuffle a room that may be admitting).
-- ARGV[1] 'off': the room is taken away. Returns 0.
-- ARGV[1] 'close': ARGV[2] when every key expires (ms). Nobody is admitted
--   any more; tickets read CLOSED. Returns 0.
if ARGV[1] == 'open' then
  if redis.call('HGET', KEYS[1], 'round') == ARGV[2] then
    return 2
  end
  redis.call('DEL', unpack(KEYS))
  redis.call('HSET', KEYS[1], 'round', ARGV[2], 'active_buyers', ARGV[3], 'per_minute', ARGV[4],
    'prequeue', ARGV[5], 'ttl', ARGV[6], 'overbook', ARGV[7], 'bits', ARGV[8], 'starts', ARGV[9],
    'ends', ARGV[10], 'seed', ARGV[14] == '1' and '' or ARGV[11],
    'commitment', ARGV[14] == '1' and ARGV[11] or '', 'expires', ARGV[12], 'abandon', ARGV[13], 'tat', 0, 'seq', 0,
    'joined', 0, 'admitted', 0, 'used', 0, 'expired', 0, 'abandoned', 0, 'sold_out', 0, 'closed', 0,
    'draw', ARGV[14], 'drawn', 0, 'promoted', 0, 'lost', 0, 'published', '0-0', 'max_entries', ARGV[15] or 0, 'window', ARGV[16] or 0)
  if tonumber(ARGV[12]) > 0 then
    redis.call('PEXPIREAT', KEYS[1], ARGV[12])
  end
  return 1
elseif ARGV[1] == 'off' then
  redis.call('DEL', unpack(KEYS))
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'closed', 1, 'expires', ARGV[2])
for i = 1, #KEYS do
  redis.call('PEXPIREAT', KEYS[i], ARGV[2])
end
return 0
