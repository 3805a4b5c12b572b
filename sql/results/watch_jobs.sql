-- Waiters: mark jobs $1 as awaited (`waited` in their metadata), so that the statements
-- that finish them announce it on the done channel. Only unfinished rows not yet marked
-- are written, and rows another transaction has locked are skipped rather than waited
-- for (a held batch of hold_transaction mode locks its jobs until it commits):
-- finished_jobs.sql reports them as unmarked, and the waiter tries again later. The
-- caller reads the jobs with finished_jobs.sql right after, in a later snapshot: a job
-- that finished before its mark is found there, one that finishes after it is announced.
WITH candidates AS (
    SELECT id
    FROM {{schema}}.jobs
    WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'running', 'waiting')
      AND (metadata ? 'waited') IS NOT TRUE
    FOR UPDATE SKIP LOCKED
)
UPDATE {{schema}}.jobs j
SET metadata = coalesce(j.metadata, '{}'::jsonb) || '{"waited": true}'::jsonb
FROM candidates c
WHERE j.id = c.id;
