-- A worker that stops cleanly leaves the registry.
DELETE FROM {{schema}}.workers WHERE id = $1;
