-- A draw's seed, kept out of Redis until the draw.
--
-- A draw's warm-up writes its seed here and only the seed's commitment
-- (SHA-256 of its text) to Redis; the edge making the draw reads the seed
-- here by that commitment, ranks the frozen entries and reveals the seed
-- in Redis with the draw. Whoever reads Redis before the draw (an entry
-- script, a replica, a dump) cannot rank anyone. Insert-only: a warm-up
-- run again writes another row, and the draw reads the one its room
-- committed to.
CREATE TABLE IF NOT EXISTS draw_seeds (
    commitment  TEXT PRIMARY KEY CHECK (commitment ~ '^[0-9a-f]{64}$'),
    activity_id BIGINT NOT NULL,
    sku_id      BIGINT NOT NULL,
    seed        TEXT NOT NULL CHECK (length(seed) BETWEEN 32 AND 128),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
