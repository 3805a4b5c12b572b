-- Job dependencies (depends_on=): a child job waits (status 'waiting') until every
-- parent is done, then becomes pending in the transaction that finished its last
-- parent; a parent that ends failed or cancelled cancels it (on_parent_failure
-- "cancel", the default, transitively) or counts as finished ("run").
--
-- The state. job_dependencies holds one edge per (child, parent): the parent's final
-- status (`outcome`, NULL until it has one) and, when done, its result. A parent
-- carries `dependents` in its metadata, a child `on_parent_failure`. The statements
-- that end jobs (sql/complete/, sql/claim/dequeue_completing.sql, claim_limited(),
-- cancel, rescue) call settle_dependents() with the ids of the rows whose metadata has
-- `dependents` only: for every other job the whole cost is one `?` test on its
-- metadata (NULL for most), and no function is called when no finished row has it.
--
-- Why no release is lost or doubled:
-- - Enqueue against completion. add_dependencies() locks the parents' rows (FOR NO KEY
--   UPDATE, in id order) before it reads their statuses and sets `dependents`. A
--   completion that comes first holds the row: the enqueue waits, then reads the
--   parent's final status and settles the edge itself. A completion that comes second
--   waits for the enqueue's commit, and its UPDATE then works on the row as the enqueue
--   left it (READ COMMITTED re-reads a row it waited for), `dependents` included; the
--   edges are read by settle_dependents(), a VOLATILE function, whose statements each
--   take a new snapshot and so see the enqueue's committed edges and child.
-- - Completions against each other. Each edge is written by its parent's end only
--   (`outcome IS DISTINCT FROM` the new one: a repeat changes nothing). The child is
--   then decided under its row lock (FOR UPDATE, children in id order), by a statement
--   that starts after the lock is granted: it sees every edge committed before, and a
--   completion still in progress decides the child after this one commits, with this
--   one's edge visible. So the completion of the last parent, and only it, sees no
--   open edge; `status = 'waiting'`, re-checked under the lock, makes the release
--   happen once.
-- - Children are locked in id order within a call. The done paths call once per
--   parent row (a call per batch would cost every job more: dequeue_completing.sql), so
--   two batches whose parents have different children in crossed orders can deadlock;
--   PostgreSQL then aborts one statement, whose outcomes the worker writes again
--   (40P01 is a transient error). No outcome is lost, the release is only later.
--
-- Their DECLARE sections name pg_catalog's types: add_dependencies() runs the others as
-- the schema's owner, and PL/pgSQL keeps the types of a session's first call (wake.sql).
--
-- A parent_id below 0 is a workflow group (-its id): workflows.sql settles its edges
-- from the group's counters, fed by settle_dependents() and revive_dependents(), and by
-- count_member(), which the done paths call instead of settle_dependents() for a member
-- with `group` in its metadata (a member that is no job's parent: add_dependencies()
-- takes `group` away from one it makes a parent).
--
-- A released child is announced like any runnable job (wake_once(), wake.sql): an
-- UPDATE fires no insert trigger. Retrying a parent (retry_jobs.sql) reopens its edges
-- and brings back the children it cancelled (revive_dependents()).

-- Decide waiting children: cancelled if a parent failed or was cancelled and the child's
-- policy is "cancel" (its own children then follow), pending when no parent is open.
CREATE OR REPLACE FUNCTION {{schema}}.settle_children(children bigint[])
 RETURNS integer
 LANGUAGE plpgsql
 STRICT
AS $function$
DECLARE
    child record;
    culprit pg_catalog.int8;
    culprit_outcome pg_catalog.text;
    open pg_catalog.bool;
    changed pg_catalog.int4 := 0;
    cascaded pg_catalog.int8[];
BEGIN
    FOR child IN
        SELECT j.id, j.queue, j.run_at, j.metadata
        FROM {{schema}}.jobs j
        WHERE j.id = ANY(children) AND j.status = 'waiting'
        ORDER BY j.id
        FOR UPDATE OF j
    LOOP
        culprit := NULL;
        SELECT d.parent_id, d.outcome::text INTO culprit, culprit_outcome
        FROM {{schema}}.job_dependencies d
        WHERE d.child_id = child.id AND d.outcome IN ('failed', 'cancelled')
          AND d.kind <> 'sequence'  -- a sequence edge holds or goes on (sequences.sql)
        ORDER BY d.parent_id
        LIMIT 1;
        IF culprit IS NOT NULL AND child.metadata->>'on_parent_failure' IS DISTINCT FROM 'run' THEN
            UPDATE {{schema}}.jobs j
            SET status = 'cancelled', finished_at = now(),
                last_error = CASE WHEN culprit < 0  -- a workflow group (workflows.sql)
                    THEN format('cancelled: a member of group %s ended failed or cancelled', -culprit)
                    ELSE format('cancelled: parent job %s ended %s', culprit, culprit_outcome) END,
                metadata = coalesce(j.metadata, '{}') || jsonb_build_object('cancelled_by', culprit)
            WHERE j.id = child.id;
            IF child.metadata ? 'waited' THEN
                PERFORM pg_notify({{done_channel}}, child.id::text);
            END IF;
            IF child.metadata ? 'dependents' THEN
                cascaded := array_append(cascaded, child.id);
            END IF;
            changed := changed + 1;
            CONTINUE;
        END IF;
        -- Open: an edge without an outcome, or a sequence edge whose parent failed (it
        -- holds the child until retried or cancelled: sequences.sql).
        open := EXISTS (
            SELECT FROM {{schema}}.job_dependencies d
            WHERE d.child_id = child.id
              AND (d.outcome IS NULL OR (d.outcome = 'failed' AND d.kind <> 'parent')));
        IF NOT open THEN
            UPDATE {{schema}}.jobs j SET status = 'pending' WHERE j.id = child.id;
            PERFORM {{schema}}.wake_once(child.queue, child.run_at);
            changed := changed + 1;
        END IF;
    END LOOP;
    IF cascaded IS NOT NULL THEN
        changed := changed + {{schema}}.settle_dependents(
            cascaded, array_fill('cancelled'::text, ARRAY[cardinality(cascaded)]), NULL);
    END IF;
    RETURN changed;
END
$function$;

-- Parents that ended (`statuses`: done, failed or cancelled; `results`: a done one's
-- result, or NULL): record it on their edges, then decide their children. Returns how
-- many jobs it released or cancelled.
CREATE OR REPLACE FUNCTION {{schema}}.settle_dependents(parents bigint[], statuses text[],
    results jsonb[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    children pg_catalog.int8[];
BEGIN
    IF parents IS NULL OR cardinality(parents) = 0 THEN
        RETURN 0;
    END IF;
    -- Group members (workflows.sql): counted at commit. A member may be a job's parent
    -- too (add_dependencies() after its workflow), so the edges are looked for all the same.
    PERFORM {{schema}}.settle_groups(parents, statuses, results);
    WITH settled AS (
        UPDATE {{schema}}.job_dependencies d
        SET outcome = p.status::{{schema}}.job_status,
            result = CASE WHEN p.status = 'done' THEN p.result END
        FROM unnest(parents, statuses, results) AS p(id, status, result)
        WHERE d.parent_id = p.id AND d.outcome IS DISTINCT FROM p.status::{{schema}}.job_status
        RETURNING d.child_id
    )
    SELECT array_agg(DISTINCT child_id) INTO children FROM settled;
    IF children IS NULL THEN
        RETURN 0;
    END IF;
    IF 'cancelled' = ANY(statuses) THEN  -- their sequences go on past them (sequences.sql)
        PERFORM {{schema}}.splice_sequences(ARRAY(
            SELECT p.id FROM unnest(parents, statuses) AS p(id, status)
            WHERE p.status = 'cancelled'));
    END IF;
    RETURN {{schema}}.settle_children(children);
END
$function$;

-- Retried parents: their edges open again, and the children they cancelled come back
-- waiting (and theirs, transitively). A child another failed parent still cancels is
-- cancelled again, naming that one.
CREATE OR REPLACE FUNCTION {{schema}}.revive_dependents(parents bigint[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    children pg_catalog.int8[];
    revived pg_catalog.int8[];
    deeper pg_catalog.int8[];
BEGIN
    IF parents IS NULL OR cardinality(parents) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM {{schema}}.settle_groups(  -- workflows.sql: members open again
        parents, array_fill(NULL::text, ARRAY[cardinality(parents)]), NULL);
    WITH reopened AS (
        UPDATE {{schema}}.job_dependencies d SET outcome = NULL, result = NULL
        WHERE d.parent_id = ANY(parents) AND d.outcome IS NOT NULL
        RETURNING d.child_id
    )
    SELECT array_agg(DISTINCT child_id) INTO children FROM reopened;
    IF children IS NULL THEN
        RETURN 0;
    END IF;
    WITH back AS (
        UPDATE {{schema}}.jobs j
        SET status = 'waiting', finished_at = NULL, last_error = NULL,
            metadata = j.metadata - 'cancelled_by'
        WHERE j.id = ANY(children) AND j.status = 'cancelled'
          AND (j.metadata->>'cancelled_by')::bigint = ANY(parents)
        RETURNING j.id, j.metadata ? 'dependents' AS has_dependents
    )
    SELECT array_agg(id ORDER BY id), array_agg(id ORDER BY id) FILTER (WHERE has_dependents)
    INTO revived, deeper
    FROM back;
    IF revived IS NULL THEN
        RETURN 0;
    END IF;
    IF deeper IS NOT NULL THEN
        PERFORM {{schema}}.revive_dependents(deeper);
    END IF;
    PERFORM {{schema}}.settle_children(revived);
    RETURN cardinality(revived);
END
$function$;

-- Give new jobs `children` (pending, never run, without parents or children yet) the
-- parents `parents`, with the policy `on_parent_failure` ("cancel" or "run"), in the
-- enqueue's transaction: they become waiting, or pending at once when every parent is
-- done already, or cancelled when one failed (policy "cancel"). A parent is looked up in
-- jobs, then in the archive; one in neither is refused (SQLSTATE 23503,
-- foreign_key_violation), naming it. Returns each child's status, in `children`'s order.
-- No cycle can arise: a job gets all its parents at once, before it has children (the
-- last edge of a cycle would give parents to a job that has a child already).
-- SECURITY DEFINER: a producer (grant_producer) may neither lock nor update the parents'
-- rows; it may give parents only to the jobs it enqueued (enqueued_by). Its search_path
-- ends in pg_temp (sql/README.md: definer functions).
CREATE OR REPLACE FUNCTION {{schema}}.add_dependencies(children bigint[], parents bigint[],
    on_parent_failure text DEFAULT 'cancel'::text)
 RETURNS TABLE(id bigint, status text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    missing pg_catalog.int8;
    refused pg_catalog.int8;
BEGIN
    IF add_dependencies.on_parent_failure IS NULL
       OR add_dependencies.on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'on_parent_failure must be ''cancel'' or ''run'', got %',
                coalesce(quote_literal(add_dependencies.on_parent_failure), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF add_dependencies.parents IS NULL OR cardinality(add_dependencies.parents) = 0 THEN
        RETURN QUERY
        SELECT j.id, j.status::text
        FROM unnest(add_dependencies.children) WITH ORDINALITY AS c(id, n)
        JOIN {{schema}}.jobs j ON j.id = c.id
        ORDER BY c.n;
        RETURN;
    END IF;
    SELECT p INTO refused FROM unnest(add_dependencies.parents) AS p
    WHERE p = ANY(add_dependencies.children) LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'job % cannot depend on itself', refused
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The parents' rows (and the children's), locked in id order before anything is
    -- read: this orders the enqueue against the parents' completions (the header).
    PERFORM FROM {{schema}}.jobs j
    WHERE j.id = ANY(add_dependencies.parents) OR j.id = ANY(add_dependencies.children)
    ORDER BY j.id
    FOR NO KEY UPDATE OF j;
    SELECT c INTO refused
    FROM unnest(add_dependencies.children) AS c
    LEFT JOIN {{schema}}.jobs j ON j.id = c
    WHERE j.id IS NULL OR j.status <> 'pending' OR j.attempts <> 0
       OR j.idempotency_key IS NOT NULL  -- its key's index holds pending and running jobs
       OR coalesce(j.metadata ?| ARRAY['dependents', 'on_parent_failure'], false)
       OR NOT (j.enqueued_by = session_user
               OR has_table_privilege(session_user, '{{schema}}.jobs'::regclass, 'UPDATE'))
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'job % cannot be given parents: only a new job of yours can (pending, never run, without an idempotency key, with no parents or children yet)', refused
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT p INTO missing
    FROM unnest(add_dependencies.parents) AS p
    WHERE NOT EXISTS (SELECT FROM {{schema}}.jobs j WHERE j.id = p)
      AND NOT EXISTS (SELECT FROM {{schema}}.jobs_archive a WHERE a.id = p)
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on: no job with id % in schema {{schema_name}} (a job can depend only on existing jobs; a finished one may have been pruned)', missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- A group member that becomes a parent loses `group`: its end then goes through
    -- settle_dependents(), which settles its edges as well as its group (workflows.sql).
    UPDATE {{schema}}.jobs j
    SET metadata = (coalesce(j.metadata, '{}') - 'group') || '{"dependents": true}'
    WHERE j.id = ANY(add_dependencies.parents)
      AND (NOT coalesce(j.metadata ? 'dependents', false) OR j.metadata ? 'group');
    UPDATE {{schema}}.jobs j
    SET status = 'waiting',
        metadata = coalesce(j.metadata, '{}')
            || jsonb_build_object('on_parent_failure', add_dependencies.on_parent_failure)
    WHERE j.id = ANY(add_dependencies.children);
    INSERT INTO {{schema}}.job_dependencies (child_id, parent_id, outcome, result)
    SELECT c, p.id,
           CASE WHEN p.status IN ('done', 'failed', 'cancelled') THEN p.status END,
           CASE WHEN p.status = 'done' THEN p.result END
    FROM unnest(add_dependencies.children) AS c,
         (SELECT j.id, j.status, j.result FROM {{schema}}.jobs j
          WHERE j.id = ANY(add_dependencies.parents)
          UNION ALL
          SELECT a.id, a.status, a.result FROM {{schema}}.jobs_archive a
          WHERE a.id = ANY(add_dependencies.parents)
            AND NOT EXISTS (SELECT FROM {{schema}}.jobs j WHERE j.id = a.id)) AS p
    ON CONFLICT DO NOTHING;  -- a parent named twice
    PERFORM {{schema}}.settle_children(add_dependencies.children);
    RETURN QUERY
    SELECT j.id, j.status::text
    FROM unnest(add_dependencies.children) WITH ORDINALITY AS c(id, n)
    JOIN {{schema}}.jobs j ON j.id = c.id
    ORDER BY c.n;
END
$function$;
REVOKE ALL ON FUNCTION {{schema}}.add_dependencies(bigint[], bigint[], text) FROM PUBLIC;
