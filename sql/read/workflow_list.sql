-- The $1 most recent workflows (newest first) with their jobs' counts per status
-- (jobs, else jobs_archive; 'pruned' for a job in neither), for the list view.
SELECT w.id, w.name, w.created_at, w.cancelled_at,
       (SELECT coalesce(jsonb_object_agg(s.status, s.n), '{}')::text
        FROM (SELECT coalesce(j.status::text, a.status::text, 'pruned') AS status, count(*) AS n
              FROM {{schema}}.workflow_jobs m
              LEFT JOIN {{schema}}.jobs j ON j.id = m.job_id
              LEFT JOIN {{schema}}.jobs_archive a ON j.id IS NULL AND a.id = m.job_id
              WHERE m.workflow_id = w.id
              GROUP BY 1) AS s) AS counts
FROM {{schema}}.workflows w
ORDER BY w.created_at DESC, w.id DESC
LIMIT $1;
