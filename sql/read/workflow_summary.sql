-- One workflow ($1): its row, its jobs' counts per status (jobs, else jobs_archive;
-- 'pruned' for a job in neither) and its groups with their counters (JSON), or no row
-- when no workflow has that id.
SELECT w.id, w.name, w.created_at, w.cancelled_at,
       (SELECT coalesce(jsonb_object_agg(s.status, s.n), '{}')::text
        FROM (SELECT coalesce(j.status::text, a.status::text, 'pruned') AS status, count(*) AS n
              FROM {{schema}}.workflow_jobs m
              LEFT JOIN {{schema}}.jobs j ON j.id = m.job_id
              LEFT JOIN {{schema}}.jobs_archive a ON j.id IS NULL AND a.id = m.job_id
              WHERE m.workflow_id = w.id
              GROUP BY 1) AS s) AS counts,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'id', g.id, 'name', g.name, 'size', g.size,
                    'remaining', g.remaining, 'failed', g.failed) ORDER BY g.id)
                 FROM {{schema}}.workflow_groups g WHERE g.workflow_id = w.id), '[]')::text
           AS groups
FROM {{schema}}.workflows w
WHERE w.id = $1;
