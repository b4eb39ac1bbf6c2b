-- Each warm-up by its id: what was asked and how far it got, so that a
-- warm-up whose caller went away, or whose process died, is seen (the
-- reconciliation names it) and finished by repeating it (shared/src/sales).
-- buckets: the round's, once placed; retired: the previous round's that it
-- lists no more. step: STARTED (buckets placed and being held still),
-- COMMITTED (the round is PostgreSQL's; Redis is being loaded), DONE,
-- REFUSED (orders in flight: nothing changed; repeating tries again).
CREATE TABLE warmups (
    warmup_id   text PRIMARY KEY,
    activity_id bigint NOT NULL,
    sku_id      bigint NOT NULL,
    request     jsonb NOT NULL,
    buckets     bigint[],
    retired     bigint[],
    round       integer,
    step        text NOT NULL CHECK (step IN ('STARTED', 'COMMITTED', 'DONE', 'REFUSED')),
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX warmups_by_sale ON warmups (activity_id, sku_id, created_at DESC);
