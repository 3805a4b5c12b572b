-- Workflows (queue.workflow(...)): a graph of jobs enqueued in one transaction, with
-- groups (add_many) that their dependents wait for as ONE parent.
--
-- The state (migrations/0025_workflows.sql). A workflow is a row of `workflows`; each of
-- its jobs a row of `workflow_jobs` (node, group, parents as enqueued). A job's edges to
-- job parents are job_dependencies rows, settled as any (sql/functions/dependencies.sql).
-- A group is a row of `workflow_groups` with two counters: `remaining` (members not
-- done) and `failed` (members that ended failed or cancelled). Its dependents each have
-- ONE edge whose parent_id is the group's id negated (-id: job ids are positive), so a
-- group of 10,000 members is one edge per dependent, not 10,000, and nothing scans the
-- members when one finishes.
--
-- The counters. A member carries `dependents` in its metadata, so every statement that
-- ends jobs treats it as a parent (and no other job: jobs outside workflows pay nothing
-- new), and `group` (its group's id), which the done paths (complete_done.sql,
-- commit_done.sql, dequeue_completing.sql, claim_limited()) test only on rows that have
-- `dependents`. There are two ways in:
-- - A member done (the hot path): count_member(), once per such row, only appends the
--   member's id to the transaction's pending counts, with no statement on any table but
--   the transaction's first mark. At commit, one read (count_groups()) counts the named
--   members that the transaction leaves done, per group. Nothing is written for the
--   member itself: its workflow_jobs outcome stays NULL (no later path changes a done
--   job), and its result is read where it is (its jobs row, the archive's, or, once
--   pruned, workflow_jobs', where prune.sql keeps it: sql/read/parent_results.sql).
-- - Every other change (a member failed, cancelled, rescued or retried, or done by a
--   job enqueued before members carried `group`): settle_dependents() or
--   revive_dependents() call settle_groups(), which writes the member's outcome in its
--   own workflow_jobs row (no row shared with other members) at once and adds the
--   group's net change to the pending counts.
-- The pending counts are a transaction-local setting (count_setting()); the
-- transaction's first change also inserts a row in workflow_count_marks, whose
-- DEFERRABLE INITIALLY DEFERRED trigger runs count_groups() when the transaction
-- commits: it counts the members count_member() named, sums the changes per group and
-- applies each group's sum with ONE update of the group's row (`remaining`: members not
-- done, `failed`: members that ended failed or cancelled), however many members the
-- transaction ended. So a completion batch is one read for its members and one counter
-- update per group, taken at commit: the group's row is locked only from then until
-- the commit, and completions on other workers queue on it that long, not for their
-- whole statement.
-- A group is `done` when remaining = 0 and failed = 0, `failed` when failed > 0, open
-- otherwise; when that state changes, its edge is settled (settle_dependents(-id): the
-- children decided as for a job parent, policies and cascade included) or reopened
-- (revive_dependents(-id): the children its failure cancelled come back).
--
-- Why no decrement is lost or doubled:
-- - A member's own change is counted once. Done (the hot path): the done paths end a
--   job only from `running` under its lease, so one run is done once, and a done job is
--   never changed again (retry takes failed and cancelled jobs, cancel and rescue
--   unfinished ones); a running member's outcome is NULL (a failure or cancel recorded
--   it, and the retry that made it run again cleared it), and only members with a NULL
--   outcome are counted. Every other change (settle_groups()) compares the outcome it
--   writes with the one the row holds (`IS DISTINCT FROM`) and counts only the
--   difference: a rescue of a job already ended, a second cancel change nothing. No
--   other transaction changes the row meanwhile: every path that ends, cancels or
--   retries a member holds the member's jobs row until its commit.
-- - What count_member() defers is counted from the member's jobs row as the transaction
--   leaves it (done, or moved to the archive by the same transaction), not from what
--   was named: a member done and then put back in the same transaction is not counted.
-- - The pending counts live and die with the transaction that made them: a setting set
--   with is_local and the mark row both roll back with it (a savepoint too), and both
--   are emptied by the commit-time count. What is counted is exactly what commits.
-- - Transactions meet on the group's row: `remaining = remaining + delta` is an
--   UPDATE, so a second transaction waits for the first's commit and then applies its
--   delta to the committed row (READ COMMITTED re-evaluates the row it waited for).
--   The row stays locked until this commit, so the values RETURNING gives minus this
--   transaction's delta are exactly the state before it: the transaction that moves
--   remaining to 0 is one, and only it settles the group's edge, in its own commit.
-- - A retry of a member (retry_jobs.sql -> revive_dependents) clears its outcome the same
--   way: a failed or cancelled member leaves `failed`; when failed reaches 0 the group's
--   edge reopens and its cancelled dependents come back.
-- - A crash before the commit loses nothing: the member's end, its count and the release
--   of the group's dependents commit together or not at all.
-- - Enqueue: enqueue_workflow() writes every row of the graph in one statement (the
--   jobs with their metadata and status), before any of its jobs is visible to a
--   worker: nothing can finish before its edges and counters exist.
-- count_groups() updates the groups of one transaction in id order. A transaction that
-- releases a group's dependents may end members of other groups through a cancel
-- cascade; two such can deadlock, and PostgreSQL aborts one, whose outcomes the worker
-- writes again (40P01 is transient), as for crossed children in dependencies.sql.
--
-- Definer: enqueue_workflow() and create_workflow() run as the schema's owner (a
-- producer may not write the jobs' metadata and status); search_path ends in pg_temp and its DECLARE names pg_catalog's
-- types (sql/README.md, wake.sql).

-- The members among `parents` moved to `statuses` (done, failed, cancelled; NULL: retried,
-- open again), `results` the done ones' results: each member's outcome, and each group's
-- net change, added to this transaction's pending counts (the transaction-local setting
-- count_setting()); the first change of a transaction inserts its mark, whose deferred
-- trigger counts them at commit (count_groups()). Returns how many of `parents` changed
-- as group members. (A member done by a done path comes here only when its metadata has
-- no `group`: count_member() defers the others.)
-- The outcome before (`o`, read by this statement's own snapshot) is the latest: every
-- path that ends, cancels or retries a member holds its jobs row, so no other
-- transaction changes its workflow_jobs row meanwhile.
CREATE OR REPLACE FUNCTION {{schema}}.settle_groups(parents bigint[], statuses text[],
    results jsonb[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_variable
DECLARE
    moved pg_catalog.int4;
    entry pg_catalog.text;
    pending pg_catalog.text;
    gid pg_catalog.int8;
    was pg_catalog.text;
    now_ pg_catalog.text;
BEGIN
    IF cardinality(parents) = 1 THEN
        -- A single parent (cancel.sql, and the done paths for a member without `group`):
        -- statements on the primary key
        -- whose cached generic plans stay index lookups (a join with unnest() may not).
        now_ := statuses[1];
        -- One statement: the subquery reads the row as this statement's snapshot has it,
        -- before the update (the outcome the header says no one else changes meanwhile).
        UPDATE {{schema}}.workflow_jobs w
        SET outcome = now_::{{schema}}.job_status,
            result = CASE WHEN now_ = 'done' THEN results[1] END
        WHERE w.job_id = parents[1] AND w.group_id IS NOT NULL
          AND w.outcome IS DISTINCT FROM now_::{{schema}}.job_status
        RETURNING w.group_id, (SELECT o.outcome::text FROM {{schema}}.workflow_jobs o
                               WHERE o.job_id = w.job_id)
        INTO gid, was;
        IF gid IS NULL THEN
            RETURN 0;  -- not a group member, or a repeat (its edges: none, or settled)
        END IF;
        moved := 1;
        entry := gid || ','
            || ((was IS NOT DISTINCT FROM 'done')::int - (now_ IS NOT DISTINCT FROM 'done')::int)
            || ',' || (coalesce(now_ IN ('failed', 'cancelled'), false)::int
                       - coalesce(was IN ('failed', 'cancelled'), false)::int);
    ELSE
        -- Batches (errors, cancels, rescues, retries): one statement, planned for its
        -- arrays each time (EXECUTE).
        EXECUTE $sql$
        WITH changed AS (
            UPDATE {{schema}}.workflow_jobs w
            SET outcome = p.status::{{schema}}.job_status,
                result = CASE WHEN p.status = 'done' THEN p.result END
            FROM unnest($1, $2, $3) AS p(id, status, result), {{schema}}.workflow_jobs o
            WHERE w.job_id = p.id AND o.job_id = w.job_id AND w.group_id IS NOT NULL
              AND w.outcome IS DISTINCT FROM p.status::{{schema}}.job_status
            RETURNING w.group_id, o.outcome::text AS was, p.status AS now
        ), per_group AS (
            SELECT group_id, count(*) AS n,
                   sum((was IS NOT DISTINCT FROM 'done')::int
                       - (now IS NOT DISTINCT FROM 'done')::int) AS d_remaining,
                   sum(coalesce(now IN ('failed', 'cancelled'), false)::int
                       - coalesce(was IN ('failed', 'cancelled'), false)::int) AS d_failed
            FROM changed
            GROUP BY group_id
        )
        SELECT coalesce(sum(n), 0)::int,
               string_agg(group_id || ',' || d_remaining || ',' || d_failed, ';')
        FROM per_group
        $sql$ INTO moved, entry USING parents, statuses, results;
    END IF;
    IF entry IS NOT NULL THEN
        pending := current_setting({{schema}}.count_setting(), true);
        IF coalesce(pending, '') = '' THEN
            INSERT INTO {{schema}}.workflow_count_marks (txid) VALUES (txid_current());
            PERFORM set_config({{schema}}.count_setting(), entry, true);
        ELSE
            PERFORM set_config({{schema}}.count_setting(), pending || ';' || entry, true);
        END IF;
    END IF;
    RETURN moved;
END
$function$;

-- A member of a group done (the done paths, once per finished row with `group` in its
-- metadata): its id added to this transaction's pending counts, and on the transaction's
-- first change its mark inserted; count_groups() writes its outcome and counts it at
-- commit. Expressions only (no statement but the first mark), so a batch of members costs
-- one setting write each.
CREATE OR REPLACE FUNCTION {{schema}}.count_member(member bigint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    pending pg_catalog.text;
BEGIN
    pending := current_setting({{schema}}.count_setting(), true);
    IF coalesce(pending, '') = '' THEN
        INSERT INTO {{schema}}.workflow_count_marks (txid) VALUES (txid_current());
        pending := set_config({{schema}}.count_setting(), member::pg_catalog.text, true);
    ELSE
        pending := set_config({{schema}}.count_setting(), pending || ';' || member, true);
    END IF;
    RETURN 1;
END
$function$;

-- The name of the transaction-local setting that holds a transaction's pending group
-- counts in this schema, entries split by ';': "group,d_remaining,d_failed" (a change
-- settle_groups() wrote) or a bare job id (a member count_member() deferred). A setting,
-- not a table: it costs no write, and a rolled back (sub)transaction takes its part back
-- with it.
CREATE OR REPLACE FUNCTION {{schema}}.count_setting()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT 'aiopgq.group_counts_' || md5('{{schema_name}}') $function$;

-- At commit (the mark's deferred trigger): the members count_member() named that are
-- done, counted per group by one read; this transaction's pending counts and theirs,
-- summed per group and added to each group's row in id order (locked
-- from then until the commit: a short hold), then the edge of each group whose state
-- changed is settled or reopened.
-- Its joins are index lookups by primary key from a batch of ids: the planner would
-- rather hash a whole small table (workflow_jobs of one group of 10,000 is ~300 pages) than
-- probe it 100 times, which costs milliseconds per commit, so hash and merge joins are off
-- while it runs (and while the settling it calls runs: lookups by key too).
CREATE OR REPLACE FUNCTION {{schema}}.count_groups()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    pending pg_catalog.text;
    members pg_catalog.int8[];
    deferred pg_catalog.text;
    d record;
    g record;
    before pg_catalog.text;
    after pg_catalog.text;
BEGIN
    pending := coalesce(current_setting({{schema}}.count_setting(), true), '');
    PERFORM set_config({{schema}}.count_setting(), '', true);
    DELETE FROM {{schema}}.workflow_count_marks m WHERE m.txid = NEW.txid;
    members := ARRAY(SELECT DISTINCT e::pg_catalog.int8
                     FROM unnest(string_to_array(pending, ';')) AS e
                     WHERE e <> '' AND strpos(e, ',') = 0);
    IF cardinality(members) > 0 THEN
        -- The members named, done as this transaction leaves them (a row moved to the
        -- archive meanwhile counts as done), counted per group. Reads only: a member's
        -- workflow_jobs row is not written (its result stays in its jobs row, and then in
        -- the archive's or, when pruned, in workflow_jobs': prune.sql), which halved
        -- what a member's completion costs the server (benchmarks/workflows.py). Its
        -- cached generic plan is index lookups (unnest() estimated at 10 rows).
        SELECT string_agg(c.group_id || ',' || -c.n || ',0', ';')
        INTO deferred
        FROM (SELECT w.group_id, count(*) AS n
              FROM unnest(members) AS m(id)
              JOIN {{schema}}.workflow_jobs w ON w.job_id = m.id
              LEFT JOIN {{schema}}.jobs j ON j.id = m.id
              WHERE w.group_id IS NOT NULL AND w.outcome IS NULL
                AND (j.id IS NULL OR j.status = 'done')
              GROUP BY w.group_id) AS c;
        pending := pending || ';' || coalesce(deferred, '');
    END IF;
    FOR d IN
        SELECT split_part(e, ',', 1)::pg_catalog.int8 AS id,
               sum(split_part(e, ',', 2)::pg_catalog.int4) AS d_remaining,
               sum(split_part(e, ',', 3)::pg_catalog.int4) AS d_failed
        FROM unnest(string_to_array(pending, ';')) AS e
        WHERE strpos(e, ',') > 0
        GROUP BY 1
        ORDER BY 1
    LOOP
        CONTINUE WHEN d.d_remaining = 0 AND d.d_failed = 0;
        UPDATE {{schema}}.workflow_groups w
        SET remaining = w.remaining + d.d_remaining, failed = w.failed + d.d_failed
        WHERE w.id = d.id
        RETURNING w.id, w.remaining, w.failed INTO g;
        CONTINUE WHEN g.id IS NULL;
        before := CASE WHEN g.failed - d.d_failed > 0 THEN 'failed'
                       WHEN g.remaining - d.d_remaining = 0 THEN 'done' END;
        after := CASE WHEN g.failed > 0 THEN 'failed' WHEN g.remaining = 0 THEN 'done' END;
        CONTINUE WHEN before IS NOT DISTINCT FROM after;
        IF before IS NOT NULL THEN
            PERFORM {{schema}}.revive_dependents(ARRAY[-g.id]);
        END IF;
        IF after IS NOT NULL THEN
            PERFORM {{schema}}.settle_dependents(ARRAY[-g.id], ARRAY[after], NULL);
        END IF;
    END LOOP;
    RETURN NULL;
END
$function$;
-- A constraint trigger cannot be replaced: dropped and made again (re-applied with its
-- file, inside migrate()'s transaction).
DROP TRIGGER IF EXISTS workflow_count_marks_count ON {{schema}}.workflow_count_marks;
CREATE CONSTRAINT TRIGGER workflow_count_marks_count AFTER INSERT
    ON {{schema}}.workflow_count_marks DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.count_groups();

-- A workflow's graph, for jobs the caller has just inserted (pending, never run):
-- `jobs` with their `nodes` (the builder's index), `groups` (1-based index into
-- `group_names`, NULL for a single job) and `policies` (on_parent_failure); edges
-- (edge_children[i] depends on edge_parents[i]: a job id of `jobs`, or -k for group k).
-- Every edge goes from a lower node to a higher one (the builder numbers its nodes in a
-- topological order), which refuses a cycle here too. Returns the workflow's id.
CREATE OR REPLACE FUNCTION {{schema}}.create_workflow(name text, jobs bigint[], nodes integer[],
    groups integer[], policies text[], group_names text[], edge_children bigint[],
    edge_parents bigint[])
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    wid pg_catalog.int8;
    gids pg_catalog.int8[];
    ec pg_catalog.int8[];
    ep pg_catalog.int8[];
    refused pg_catalog.int8;
BEGIN
    IF cardinality(jobs) IS DISTINCT FROM cardinality(nodes)
       OR cardinality(jobs) IS DISTINCT FROM cardinality(groups)
       OR cardinality(jobs) IS DISTINCT FROM cardinality(policies)
       OR cardinality(edge_children) IS DISTINCT FROM cardinality(edge_parents) THEN
        RAISE EXCEPTION 'create_workflow: arrays of different lengths'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM unnest(policies) AS p WHERE p IS NULL OR p NOT IN ('cancel', 'run')) THEN
        RAISE EXCEPTION 'on_parent_failure must be ''cancel'' or ''run'''
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM FROM {{schema}}.jobs j WHERE j.id = ANY(jobs) ORDER BY j.id FOR NO KEY UPDATE OF j;
    SELECT c INTO refused
    FROM unnest(jobs) AS c
    LEFT JOIN {{schema}}.jobs j ON j.id = c
    WHERE j.id IS NULL OR j.status <> 'pending' OR j.attempts <> 0
       OR j.idempotency_key IS NOT NULL
       OR coalesce(j.metadata ?| ARRAY['dependents', 'on_parent_failure', 'workflow'], false)
       OR NOT (j.enqueued_by = session_user
               OR has_table_privilege(session_user, '{{schema}}.jobs'::regclass, 'UPDATE'))
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'job % cannot join a workflow: only a new job of yours can (pending, never run, without an idempotency key, parents or children)', refused
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO {{schema}}.workflows (name) VALUES (create_workflow.name) RETURNING id INTO wid;
    WITH made AS (
        INSERT INTO {{schema}}.workflow_groups (workflow_id, name, size, remaining)
        SELECT wid, g.name, count(m.k), count(m.k)
        FROM unnest(group_names) WITH ORDINALITY AS g(name, k)
        LEFT JOIN unnest(groups) AS m(k) ON m.k = g.k
        GROUP BY g.k, g.name
        ORDER BY g.k
        RETURNING id
    )
    SELECT array_agg(id ORDER BY id) INTO gids FROM made;
    -- The edges with each group's placeholder (-k) replaced by its row (-id). Arrays, not
    -- a temporary table: the caller owns its session's pg_temp (sql/README.md).
    SELECT coalesce(array_agg(e.c ORDER BY e.n), '{}'),
           coalesce(array_agg(CASE WHEN e.p < 0 THEN -gids[-e.p] ELSE e.p END ORDER BY e.n), '{}')
    INTO ec, ep
    FROM unnest(edge_children, edge_parents) WITH ORDINALITY AS e(c, p, n);
    SELECT e.c INTO refused
    FROM unnest(ec, ep) AS e(c, p)
    LEFT JOIN unnest(jobs, nodes) AS c(id, node) ON c.id = e.c
    LEFT JOIN (SELECT j.id, j.node FROM unnest(jobs, nodes) AS j(id, node)
               UNION
               SELECT -gids[m.k], m.node FROM unnest(groups, nodes) AS m(k, node)
               WHERE m.k IS NOT NULL) AS p ON p.id = e.p
    WHERE c.node IS NULL OR p.node IS NULL OR p.node >= c.node
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'create_workflow: job % depends on a job that is not of this workflow or comes after it (nodes must be in a topological order: no cycle)', refused
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO {{schema}}.workflow_jobs (job_id, workflow_id, node, group_id, parents, parent_groups)
    SELECT c.id, wid, c.node, gids[c.k], coalesce(a.parents, '{}'), coalesce(a.parent_groups, '{}')
    FROM unnest(jobs, nodes, groups) AS c(id, node, k)
    LEFT JOIN (SELECT e.c,
                      array_agg(DISTINCT e.p) FILTER (WHERE e.p > 0) AS parents,
                      array_agg(DISTINCT -e.p) FILTER (WHERE e.p < 0) AS parent_groups
               FROM unnest(ec, ep) AS e(c, p)
               GROUP BY e.c) AS a ON a.c = c.id;
    UPDATE {{schema}}.jobs j
    SET metadata = coalesce(j.metadata, '{}') || jsonb_build_object('workflow', wid)
        || CASE WHEN f.k IS NOT NULL OR f.is_parent
                THEN '{"dependents": true}'::jsonb ELSE '{}'::jsonb END
        || CASE WHEN f.k IS NOT NULL AND NOT f.is_parent  -- count_member() when done
                THEN jsonb_build_object('group', gids[f.k]) ELSE '{}'::jsonb END
        || CASE WHEN f.is_child
                THEN jsonb_build_object('on_parent_failure', f.policy) ELSE '{}'::jsonb END,
        status = CASE WHEN f.is_child THEN 'waiting'::{{schema}}.job_status ELSE j.status END
    FROM (SELECT c.id, c.k, c.policy, pa.id IS NOT NULL AS is_parent, ch.id IS NOT NULL AS is_child
          FROM unnest(jobs, groups, policies) AS c(id, k, policy)
          LEFT JOIN (SELECT DISTINCT x AS id FROM unnest(ep) AS x WHERE x > 0) AS pa ON pa.id = c.id
          LEFT JOIN (SELECT DISTINCT x AS id FROM unnest(ec) AS x) AS ch ON ch.id = c.id) AS f
    WHERE j.id = f.id;
    INSERT INTO {{schema}}.job_dependencies (child_id, parent_id)
    SELECT DISTINCT e.c, e.p FROM unnest(ec, ep) AS e(c, p);
    RETURN wid;
END
$function$;
REVOKE ALL ON FUNCTION {{schema}}.create_workflow(text, bigint[], integer[], integer[], text[],
    text[], bigint[], bigint[]) FROM PUBLIC;

-- A whole workflow in one call: its jobs inserted with their graph's metadata and status
-- already set, then its graph. create_workflow() above takes jobs the caller inserted
-- and then rewrites each of them (a second version of every row: a group of 10,000
-- leaves 10,000 dead tuples and their index entries, which its claims then step over);
-- this writes each job once. create_workflow() stays for clients of older versions.
-- Per node of the builder, in its topological order: tasks; payloads, ONE JSON array of
-- one array per node (its jobs' payloads: a single job's one, a group's members');
-- queues, priorities, run_ats (NULL: now), max_attempts, concurrency_keys, policies
-- (on_parent_failure) and group_names (NULL for a single job). The edges by node index
-- from 0 (edge_children[i] depends on edge_parents[i]), each from a lower node to a
-- higher one, which refuses a cycle. Returns the workflow's id, its jobs' ids (node
-- order, then payload order) and their created_at.
-- Ids are drawn from the sequences first, so which id is which job is known without
-- relying on the order in which an INSERT ... SELECT produces its rows.
-- Definer: a producer may not write metadata or status, so this checks that the caller
-- may insert every column it writes on the caller's behalf, and enqueued_by is the
-- caller (session_user, as every definer function here reads it), not the owner.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_workflow(name text, tasks text[], payloads jsonb,
    queues text[], priorities integer[], run_ats timestamp with time zone[],
    max_attempts integer[], concurrency_keys text[], policies text[], group_names text[],
    edge_children integer[], edge_parents integer[], OUT workflow_id bigint,
    OUT ids bigint[], OUT created_at timestamp with time zone)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n pg_catalog.int4 := coalesce(cardinality(tasks), 0);
    sizes pg_catalog.int4[];  -- per node: how many jobs
    firsts pg_catalog.int4[];  -- per node: where its jobs start in `ids`
    gids pg_catalog.int8[];  -- per node: its group's id (NULL: a single job)
    parent_of pg_catalog.bool[];  -- per node: a single job that a later node depends on
    child_of pg_catalog.bool[];  -- per node: it depends on an earlier node
    group_seq pg_catalog.regclass;
    refused pg_catalog.text;
BEGIN
    IF n = 0 OR cardinality(queues) IS DISTINCT FROM n OR cardinality(priorities) IS DISTINCT FROM n
       OR cardinality(run_ats) IS DISTINCT FROM n OR cardinality(enqueue_workflow.max_attempts) IS DISTINCT FROM n
       OR cardinality(concurrency_keys) IS DISTINCT FROM n OR cardinality(policies) IS DISTINCT FROM n
       OR cardinality(group_names) IS DISTINCT FROM n
       OR coalesce(cardinality(edge_children), 0) <> coalesce(cardinality(edge_parents), 0)
       OR jsonb_typeof(payloads) IS DISTINCT FROM 'array' OR jsonb_array_length(payloads) <> n THEN
        RAISE EXCEPTION 'enqueue_workflow: no node, or arrays of different lengths'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT string_agg(c, ', ') INTO refused
    FROM unnest(ARRAY['task', 'payload', 'queue', 'priority', 'run_at', 'max_attempts',
                      'concurrency_key']) AS c
    WHERE NOT has_column_privilege(session_user, '{{schema}}.jobs'::pg_catalog.regclass, c, 'INSERT');
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'permission denied for table jobs: enqueue_workflow inserts columns % that role % may not insert', refused, session_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'the schema''s owner can grant them: SELECT {{schema_name}}.grant_producer(role)';
    END IF;
    IF EXISTS (SELECT FROM unnest(policies) AS p WHERE p IS NULL OR p NOT IN ('cancel', 'run')) THEN
        RAISE EXCEPTION 'on_parent_failure must be ''cancel'' or ''run'''
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    sizes := ARRAY(SELECT CASE WHEN jsonb_typeof(payloads -> (k - 1)) = 'array'
                               THEN jsonb_array_length(payloads -> (k - 1)) END
                   FROM generate_series(1, n) AS k ORDER BY k);
    SELECT k - 1 INTO refused
    FROM generate_series(1, n) AS k
    WHERE sizes[k] IS NULL OR sizes[k] < 1 OR (group_names[k] IS NULL AND sizes[k] <> 1)
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'enqueue_workflow: node % needs an array of its payloads (one for a single job, at least one for a group)', refused
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT e.c || ' on ' || coalesce(e.p::pg_catalog.text, 'NULL') INTO refused
    FROM unnest(edge_children, edge_parents) AS e(c, p)
    WHERE e.c IS NULL OR e.p IS NULL OR e.p < 0 OR e.c >= n OR e.p >= e.c
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'enqueue_workflow: edge % (child node on parent node): a parent must be an earlier node of this workflow (nodes in a topological order: no cycle)', refused
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    firsts := ARRAY(SELECT (1 + coalesce(sum(s) OVER (ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING
                                                                    AND 1 PRECEDING), 0))::pg_catalog.int4
                    FROM unnest(sizes) WITH ORDINALITY AS x(s, k) ORDER BY k);
    ids := ARRAY(SELECT nextval('{{schema}}.jobs_id_seq'::pg_catalog.regclass)
                 FROM generate_series(1, firsts[n] + sizes[n] - 1) ORDER BY 1);
    group_seq := pg_get_serial_sequence('{{schema}}.workflow_groups', 'id')::pg_catalog.regclass;
    gids := ARRAY(SELECT CASE WHEN g IS NOT NULL THEN nextval(group_seq) END
                  FROM unnest(group_names) WITH ORDINALITY AS x(g, k) ORDER BY k);
    parent_of := ARRAY(SELECT group_names[k] IS NULL AND k - 1 IN (SELECT unnest(edge_parents))
                       FROM generate_series(1, n) AS k ORDER BY k);
    child_of := ARRAY(SELECT k - 1 IN (SELECT unnest(edge_children))
                      FROM generate_series(1, n) AS k ORDER BY k);
    created_at := now();
    INSERT INTO {{schema}}.workflows (name) VALUES (enqueue_workflow.name)
    RETURNING id INTO workflow_id;
    INSERT INTO {{schema}}.workflow_groups (id, workflow_id, name, size, remaining)
    OVERRIDING SYSTEM VALUE
    SELECT gids[x.k], enqueue_workflow.workflow_id, x.g, sizes[x.k], sizes[x.k]
    FROM unnest(group_names) WITH ORDINALITY AS x(g, k)
    WHERE x.g IS NOT NULL;
    -- The wake-up decision once per queue of the jobs that run at once (wake.sql), before
    -- the rows: the insert trigger then returns at once for the last queue decided.
    PERFORM {{schema}}.wake_once(q.queue, q.run_at)
    FROM (SELECT queues[k] AS queue, min(coalesce(run_ats[k], now())) AS run_at
          FROM generate_series(1, n) AS k
          WHERE NOT child_of[k]
          GROUP BY 1) AS q;
    INSERT INTO {{schema}}.jobs (id, task, payload, queue, priority, run_at, max_attempts,
                                 concurrency_key, metadata, status, enqueued_by)
    OVERRIDING SYSTEM VALUE
    SELECT ids[firsts[nd.k] + p.m - 1], tasks[nd.k], p.payload, queues[nd.k], priorities[nd.k],
           coalesce(run_ats[nd.k], now()), enqueue_workflow.max_attempts[nd.k],
           concurrency_keys[nd.k], nd.metadata,
           CASE WHEN child_of[nd.k] THEN 'waiting' ELSE 'pending' END::{{schema}}.job_status,
           session_user
    FROM (SELECT k, jsonb_build_object('workflow', enqueue_workflow.workflow_id)
                 -- a group member or a parent: the done paths settle it (count_member())
                 || CASE WHEN gids[k] IS NOT NULL OR parent_of[k]
                         THEN '{"dependents": true}'::pg_catalog.jsonb ELSE '{}' END
                 || CASE WHEN gids[k] IS NOT NULL
                         THEN jsonb_build_object('group', gids[k]) ELSE '{}' END
                 || CASE WHEN child_of[k]
                         THEN jsonb_build_object('on_parent_failure', policies[k]) ELSE '{}' END
                 AS metadata
          FROM generate_series(1, n) AS k) AS nd
    CROSS JOIN LATERAL jsonb_array_elements(payloads -> (nd.k - 1)) WITH ORDINALITY AS p(payload, m);
    INSERT INTO {{schema}}.workflow_jobs (job_id, workflow_id, node, group_id, parents, parent_groups)
    SELECT ids[firsts[nd.k] + m - 1], enqueue_workflow.workflow_id, nd.k - 1, gids[nd.k],
           coalesce(e.parents, '{}'), coalesce(e.parent_groups, '{}')
    FROM generate_series(1, n) AS nd(k)
    CROSS JOIN LATERAL generate_series(1, sizes[nd.k]) AS m
    LEFT JOIN (SELECT e.c + 1 AS k,
                      array_agg(DISTINCT ids[firsts[e.p + 1]]) FILTER (WHERE gids[e.p + 1] IS NULL)
                          AS parents,
                      array_agg(DISTINCT gids[e.p + 1]) FILTER (WHERE gids[e.p + 1] IS NOT NULL)
                          AS parent_groups
               FROM unnest(edge_children, edge_parents) AS e(c, p)
               GROUP BY e.c) AS e ON e.k = nd.k;
    INSERT INTO {{schema}}.job_dependencies (child_id, parent_id)
    SELECT DISTINCT ids[firsts[e.c + 1] + m - 1],
           CASE WHEN gids[e.p + 1] IS NULL THEN ids[firsts[e.p + 1]] ELSE -gids[e.p + 1] END
    FROM unnest(edge_children, edge_parents) AS e(c, p)
    CROSS JOIN LATERAL generate_series(1, sizes[e.c + 1]) AS m;
END
$function$;
REVOKE ALL ON FUNCTION {{schema}}.enqueue_workflow(text, text[], jsonb, text[], integer[],
    timestamp with time zone[], integer[], text[], text[], text[], integer[], integer[]) FROM PUBLIC;
