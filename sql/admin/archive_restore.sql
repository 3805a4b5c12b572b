-- Move the jobs $1 whose status is one of $2 back from jobs_archive into jobs, under
-- their own ids, so that retry_jobs.sql can re-queue them (Control.retry runs both in
-- one transaction: the maintenance leader cannot move them out again in between).
-- Returns how many came back.
WITH restored AS (
    DELETE FROM {{schema}}.jobs_archive
    WHERE id = ANY($1::bigint[]) AND status = ANY($2::{{schema}}.job_status[])
    RETURNING *
), inserted AS (
    INSERT INTO {{schema}}.jobs OVERRIDING SYSTEM VALUE
    SELECT * FROM restored
    RETURNING id
)
SELECT count(*) FROM inserted;
