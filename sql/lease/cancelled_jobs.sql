-- Which of the jobs $1 are cancelled (cancel.sql wrote status 'cancelled'): the worker
-- reads this before it stops a handler for a {"cancel": id} control message, since any
-- role that can connect can send one (aiopgq/_worker/control.py). One statement for all
-- the messages that arrived together; the primary key finds each row.
SELECT coalesce(array_agg(id), '{}')
FROM {{schema}}.jobs
WHERE id = ANY($1::bigint[]) AND status = 'cancelled';
