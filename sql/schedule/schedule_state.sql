-- Where the schedules $1 stand, and the database's clock (every worker reads the same).
SELECT name, last_tick, since, now() AS now
FROM {{schema}}.schedules
WHERE name = ANY($1::text[]);
