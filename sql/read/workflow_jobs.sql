-- The jobs of workflow $1 in node order: their node, group, parents as enqueued (job
-- ids, and groups by id), and task, status and times from jobs, else from jobs_archive
-- (status NULL: pruned). One statement, one snapshot: a job being archived is seen once.
SELECT m.job_id, m.node, m.group_id, m.parents, m.parent_groups,
       coalesce(j.task, a.task) AS task,
       coalesce(j.status::text, a.status::text) AS status,
       coalesce(j.created_at, a.created_at) AS created_at,
       j.locked_at AS started_at,
       coalesce(j.finished_at, a.finished_at) AS finished_at,
       coalesce(j.attempts, a.attempts) AS attempts,
       coalesce(j.last_error, a.last_error) AS last_error
FROM {{schema}}.workflow_jobs m
LEFT JOIN {{schema}}.jobs j ON j.id = m.job_id
LEFT JOIN {{schema}}.jobs_archive a ON j.id IS NULL AND a.id = m.job_id
WHERE m.workflow_id = $1
ORDER BY m.node, m.job_id;
