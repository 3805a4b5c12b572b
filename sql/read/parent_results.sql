-- The results of job $1's parents that ended done (ctx.parent_results()), as JSON text,
-- from its edges: written when each parent finished, so a parent archived or pruned
-- since still counts (sql/functions/dependencies.sql). A workflow group parent (an edge
-- to -its id) gives its done members' results: from their jobs rows, else the archive's,
-- else workflow_jobs' (a member pruned, or done through settle_groups(): workflows.sql).
SELECT parent_id, result::text
FROM {{schema}}.job_dependencies
WHERE child_id = $1 AND outcome = 'done' AND parent_id > 0
UNION ALL
SELECT m.job_id, CASE WHEN j.id IS NOT NULL THEN j.result
                     WHEN a.id IS NOT NULL THEN a.result
                     ELSE m.result END::text
FROM {{schema}}.job_dependencies d
JOIN {{schema}}.workflow_jobs m ON m.group_id = -d.parent_id
LEFT JOIN {{schema}}.jobs j ON j.id = m.job_id
LEFT JOIN {{schema}}.jobs_archive a ON j.id IS NULL AND a.id = m.job_id
WHERE d.child_id = $1 AND d.parent_id < 0
  AND CASE WHEN j.id IS NOT NULL THEN j.status = 'done'
           WHEN a.id IS NOT NULL THEN a.status = 'done'
           ELSE m.outcome IS NOT DISTINCT FROM 'done' END
ORDER BY 1;
