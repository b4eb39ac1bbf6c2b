-- A warm-up a close replaced before it finished: CLOSED. The edges resume a
-- warm-up that stopped short by themselves (services/edge/src/warmup_resume.rs)
-- until it is done, a newer one replaces it, or a close does — and a closed
-- sale must not be warmed up again behind its operator's back. The table is
-- a handful of rows: the constraint is swapped at once under a live sale.
-- An older binary reads CLOSED as STARTED (its reconciliation names the
-- warm-up as unfinished) and never writes it.
ALTER TABLE warmups DROP CONSTRAINT warmups_step_check;
ALTER TABLE warmups ADD CONSTRAINT warmups_step_check
    CHECK (step IN ('STARTED', 'COMMITTED', 'DONE', 'REFUSED', 'CLOSED'));
