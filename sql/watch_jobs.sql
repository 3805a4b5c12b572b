-- Waiters: mark jobs $1 as awaited, so that the statements that finish them announce
-- it on the done channel. Only unfinished rows not yet marked are written. The caller
-- then reads the jobs with finished_jobs.sql, in a later snapshot: a job that finished
-- before this mark is found there, one that finishes after it is announced.
UPDATE {{schema}}.jobs
SET waited = true
WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'running') AND waited IS NOT TRUE;
