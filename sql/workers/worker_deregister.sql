-- A worker that stops cleanly leaves the registry. Committed without waiting for the
-- WAL flush (the last statement of a stopping worker, on its critical path): lost in a
-- crash, the row expires like any worker's that stopped beating (presence.py).
DELETE FROM {{schema}}.workers
WHERE id = $1 AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL;
