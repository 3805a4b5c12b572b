-- The results of job $1's parents that ended done (ctx.parent_results()), as JSON text,
-- from its edges: written when each parent finished, so a parent archived or pruned
-- since still counts (sql/functions/dependencies.sql).
SELECT parent_id, result::text
FROM {{schema}}.job_dependencies
WHERE child_id = $1 AND outcome = 'done'
ORDER BY parent_id;
