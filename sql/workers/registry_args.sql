-- The registry row's columns from $1-$7, as the `args` row's select list of
-- worker_register.sql and worker_start.sql (included, never run alone).
$1::text AS worker_id, $2::text AS host, $3::integer AS pid, $4::text[] AS queues,
$5::integer AS concurrency, $6::text AS version, $7::double precision AS heartbeat_interval
