-- Workers not seen for $1 of their own heartbeat intervals are gone (killed, or cut
-- off from the database): their rows go. Their jobs are the rescuer's, by lease.
DELETE FROM {{schema}}.workers
WHERE last_seen < now() - make_interval(secs => $1 * heartbeat_interval)
RETURNING id;
