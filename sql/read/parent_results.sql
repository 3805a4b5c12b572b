-- The results of job $1's parents that ended done (ctx.parent_results()), as JSON text,
-- from its edges: written when each parent finished, so a parent archived or pruned
-- since still counts (sql/functions/dependencies.sql). A workflow group parent (an edge
-- to -its id) gives its members' results, kept in workflow_jobs (workflows.sql).
SELECT parent_id, result::text
FROM {{schema}}.job_dependencies
WHERE child_id = $1 AND outcome = 'done' AND parent_id > 0
UNION ALL
SELECT m.job_id, m.result::text
FROM {{schema}}.job_dependencies d
JOIN {{schema}}.workflow_jobs m ON m.group_id = -d.parent_id AND m.outcome = 'done'
WHERE d.child_id = $1 AND d.parent_id < 0
ORDER BY 1;
