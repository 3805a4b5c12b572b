-- claim_limited() and lock_limited() take the key limits a worker's tasks declare
-- (@queue.task(key_concurrency=)) as a last argument, new signatures (sql/functions/
-- claim_limited.sql): the ones without it go. EXECUTE on both is PUBLIC's, so no role
-- loses a grant.
DROP FUNCTION IF EXISTS {{schema}}.claim_limited(text[], integer, text, boolean, bigint[],
    integer[], text[]);
DROP FUNCTION IF EXISTS {{schema}}.lock_limited(text, text, boolean);
