-- Flow control across the fleet: claims of the queues that have limits.
--
-- Per queue (the queues table): `concurrency` (at most N jobs of the queue running at
-- once), `rate` and `burst` (a token bucket: job starts per second, and how many may
-- start at once after a quiet spell), `key_concurrency` (at most N running jobs per
-- jobs.concurrency_key, with claims going round-robin over the keys).
--
-- Queues without limits pay nothing: workers claim them with the plain statements
-- (sql/claim/dequeue.sql), which never read the queues table. A worker reads which of
-- its queues have limits (sql/claim/queue_sets.sql) and claims those through
-- claim_limited() (sql/claim/dequeue_limited.sql).
--
-- Why a function, and why a lock: a limit is a count of running jobs, and two claims
-- that count at once both see N-1 running and both start one. So claims of a limited
-- queue take a transaction advisory lock per queue, and count AFTER they hold it. In
-- READ COMMITTED a statement's snapshot is taken when it starts, before a lock it waits
-- for inside; a claim that waited for its peer would still count with a snapshot from
-- before the peer committed. Each statement of a VOLATILE PL/pgSQL function takes a
-- fresh snapshot, so the counts in claim_limited(), taken after the lock, see every
-- claim committed before ours (the lock is released only after the peer's commit).
-- Only claims of limited queues take the lock; no claim ever locks the queue row
-- itself, except to store the token bucket of a rate limit.
--
-- Lanes: one lock per queue would make the claims of a queue take turns through their
-- commits, WAL flush included (with a limit that never binds, a drain of several worker
-- processes ran well below the unlimited one: docs/limits.md). So the lock is split into
-- 4 lanes (lock_limited()). A claim of a queue whose only limit is `concurrency = N` may
-- hold a single lane while it takes at most F = N / 8 jobs (a "share"), provided the
-- running jobs it counts after taking the lane are at most N - 4F; otherwise (and always
-- for rate and key limits, whose state needs every claim in turn) it takes all 4 lanes
-- and counts exactly. Why lane claims never pass N: at most 4 of them are in flight at
-- once (one per lane), and none is while another claim holds all lanes. Take the claim
-- whose snapshot was taken last among those committed by some moment: it saw every
-- earlier commit and at most N - 4F running; the claims that committed after its
-- snapshot were all in flight then, so at most 4, each of at most F jobs; so at most
-- N - 4F + 4F = N jobs run (completions only lower it).
--
-- No index of its own by default: a new index on jobs costs every insert statement
-- (opening it and its predicate) and every claim, limits used or not. A limited claim
-- counts the queue's running jobs through jobs_running_idx (the rows with a lease: as
-- many as the fleet runs); the index of pending jobs by key (sql/admin/key_index.sql)
-- is created by configure() when a queue first gets key_concurrency.
--
-- Both functions SET enable_seqscan = off: every statement in them reads an index, and
-- before jobs has statistics (a new table, or autovacuum off and no ANALYZE yet) the
-- planner takes `heartbeat_at IS NOT NULL` for most rows and would read the whole table
-- to count a queue's running jobs.
--
-- lock_limited(q, worker, wait): lock queue q's lanes for a limited claim: one lane when
-- the queue's only limit is `concurrency` and at most N - 4 shares of it run ('lane'),
-- else all four in order ('all'). With `wait` false (a held transaction) nothing is
-- waited for: NULL when the lanes needed are taken. Lock keys: (lane's class,
-- hashtext(q)); two queue names with the same hashtext share their lanes (a claim of
-- both may then meet a deadlock, which PostgreSQL breaks and the worker retries).
--
-- claim_limited(queues, max_jobs, worker, wait, done_*): claim up to max_jobs jobs of
-- the limited queues `queues` for `worker`, after marking done the jobs this worker
-- finished (done_*: as sql/claim/dequeue_completing.sql; a job someone awaits is
-- announced on the done channel, as by sql/complete/complete_done.sql). `wait`: block
-- on a queue's lock (lease mode: claims are short), or skip a queue whose lock a peer
-- holds (hold-transaction mode: a peer holds it for a batch).
--
-- It returns the claimed rows as sql/claim/dequeue.sql does, with the trace context and
-- the job's saved checkpoint (JSON text) as the last two columns (sql/claim/
-- dequeue_limited.sql selects those only for workers that use them), and for each queue
-- whose limit held back runnable jobs one row with a NULL id:
--   (NULL, queue, 'limit', NULL, NULL, NULL, NULL, wait, NULL, NULL, NULL)
-- where wait is 0 when a running job must end first, the seconds until the next token
-- of a rate limit (or until a peer holding the queue's lock may be done, when not
-- waiting for it), or -1 when keys this claim did not visit may have room (claim
-- again).
--
-- Queues with key_concurrency are claimed round-robin over their keys: the keys with
-- pending jobs are visited in key order from the one after the queue's key_cursor,
-- wrapping around (a loose index scan: one descent of jobs_pending_key_idx per key, at
-- most `allowed + 16` keys per claim; its queries say `queue = q`, which only that
-- index serves: see sql/admin/key_index.sql); each key gives at most key_concurrency
-- minus its running jobs; within a priority each key gives its first job before any key
-- gives its second. Jobs without a key are one more group, served first in each round,
-- found among the queue's next `allowed` pending jobs in its usual order
-- (jobs_pending_key_idx does not hold them). The next claim starts after the last key
-- served (or the last key visited, when the visit was cut short and gave too few jobs).
--
-- Declared key limits: a worker passes the key limits its tasks declare
-- (`@queue.task(key_concurrency=N)`, the smallest per queue) as key_limits; the queue's
-- stored key_concurrency wins over them.

-- The locks of queue q for a claim (see claim_limited below): 'lane', 'all', or NULL
-- when not `wait`ing and a peer holds them. key_limit: the key limit the claiming
-- worker's tasks declare for q; a key limit, stored or declared, takes every lane.
CREATE OR REPLACE FUNCTION {{schema}}.lock_limited(q text, worker text, wait boolean,
                                                   key_limit integer DEFAULT NULL)
 RETURNS text
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    lanes constant integer := 4;
    s record;
    share integer;
    running integer;
BEGIN
    SELECT c.concurrency, c.rate, c.key_concurrency INTO s
    FROM {{schema}}.queues AS c WHERE c.queue = q;
    share := s.concurrency / (2 * lanes);
    IF s.rate IS NULL AND coalesce(s.key_concurrency, key_limit) IS NULL AND share >= 1 THEN
        SELECT count(*) INTO running FROM (
            SELECT 1 FROM {{schema}}.jobs AS r
            WHERE r.heartbeat_at IS NOT NULL AND r.status = 'running' AND r.queue = q
            LIMIT s.concurrency - lanes * share + 1) AS r;
        IF running <= s.concurrency - lanes * share THEN
            FOR lane IN 0 .. lanes - 1 LOOP
                IF pg_try_advisory_xact_lock(hashtext('{{schema_name}}:limit:' || lane),
                                             hashtext(q)) THEN
                    RETURN 'lane';
                END IF;
            END LOOP;
            IF NOT wait THEN
                RETURN NULL;
            END IF;
            PERFORM pg_advisory_xact_lock(
                hashtext('{{schema_name}}:limit:' || abs(hashtext(worker) % lanes)), hashtext(q));
            RETURN 'lane';
        END IF;
    END IF;
    FOR lane IN 0 .. lanes - 1 LOOP
        IF wait THEN
            PERFORM pg_advisory_xact_lock(hashtext('{{schema_name}}:limit:' || lane), hashtext(q));
        ELSIF NOT pg_try_advisory_xact_lock(hashtext('{{schema_name}}:limit:' || lane),
                                            hashtext(q)) THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN 'all';
END
$function$;

-- key_limits: {queue: limit}, the key limits the claiming worker's tasks declare
-- (@queue.task(key_concurrency=)); a queue's stored key_concurrency wins over them.
CREATE OR REPLACE FUNCTION {{schema}}.claim_limited(queues text[], max_jobs integer, worker text, wait boolean, done_ids bigint[], done_attempts integer[], done_results text[], key_limits jsonb DEFAULT NULL)
 RETURNS TABLE(id bigint, queue text, task text, payload text, priority integer, attempts integer, max_attempts integer, run_at double precision, created_at double precision, trace_context text, checkpoint text)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    lanes constant integer := 4;
    q text;
    s {{schema}}.queues%ROWTYPE;
    allowed integer;
    claimed integer;
    finished integer;  -- jobs marked done in step 1
    lock_wait text;  -- the session's lock_timeout, while step 1 sets its own
    running integer;
    bucket double precision;  -- tokens after the refill
    clock timestamptz;
    held text;  -- what held the claim back: 'slot', 'rate', 'keys' or 'share'
    share integer;
    locked text[] := '{}';  -- the queues we hold, in lock order,
    modes text[] := '{}';  -- and how: 'lane', 'all' or NULL (not held: skipped)
    keys text[];
    after_key text;  -- the key_cursor
    walk_max integer;
    cut_at text;
BEGIN
    -- 1. Outcomes first: their jobs no longer count against any limit below.
    --    A job someone awaits is announced on the done channel (complete_done.sql); one
    --    that others depend on settles its children (dependencies.sql).
    --    A row of these jobs that another transaction holds is not waited for (as in
    --    claim/dequeue_completing.sql): lock_not_available, and the worker claims again
    --    without them (aiopgq/_worker/claims.py). The queues' locks below are waited for
    --    under the session's own lock_timeout, set again after this step.
    IF cardinality(done_ids) > 0 THEN
        lock_wait := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', '10ms', true);
        WITH done AS (
            UPDATE {{schema}}.jobs j
            SET status = 'done', finished_at = now(), result = o.result::jsonb,
                locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
            FROM unnest(done_ids, done_attempts, done_results) AS o(id, attempt, result)
            WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running'
              AND j.locked_by = worker
            RETURNING CASE WHEN j.metadata ? 'waited'
                           THEN pg_notify({{done_channel}}, j.id::text) END,
                      CASE WHEN j.metadata ? 'dependents'
                           THEN CASE WHEN j.metadata ? 'group'
                                     THEN {{schema}}.count_member(j.id)
                                     ELSE {{schema}}.settle_dependents(ARRAY[j.id],
                                              ARRAY['done'], ARRAY[j.result]) END END
        )
        SELECT count(*) INTO finished FROM done;
        PERFORM set_config('lock_timeout', lock_wait, true);
    END IF;
    -- 2. The queues' locks, queue by queue in one order for every worker (two workers
    --    locking the same queues never deadlock), held until our commit.
    FOR q IN SELECT x FROM unnest(queues) AS x GROUP BY x ORDER BY hashtext(x), x LOOP
        locked := locked || q;
        modes := modes || {{schema}}.lock_limited(q, worker, wait, (key_limits ->> q)::integer);
    END LOOP;
    -- 3. Each queue in turn (the caller rotates the list) until max_jobs are claimed.
    --    Every statement from here on sees every claim committed before we got the lock.
    FOREACH q IN ARRAY queues LOOP
        EXIT WHEN max_jobs <= 0;
        IF modes[array_position(locked, q)] IS NULL THEN
            -- A peer's held transaction is claiming this queue: look again shortly.
            IF EXISTS (
                SELECT 1 FROM {{schema}}.jobs AS p
                WHERE p.status = 'pending' AND hashtext(p.queue) = hashtext(q) AND p.queue = q
                  AND p.run_at <= now()
            ) THEN
                RETURN QUERY SELECT NULL::bigint, q, 'limit'::text, NULL::text, NULL::integer,
                    NULL::integer, NULL::integer, 0.05::double precision, NULL::double precision,
                    NULL::text, NULL::text;
            END IF;
            CONTINUE;
        END IF;
        s := NULL;
        SELECT * INTO s FROM {{schema}}.queues AS c WHERE c.queue = q;
        IF key_limits IS NOT NULL THEN
            s.key_concurrency := coalesce(s.key_concurrency, (key_limits ->> q)::integer);
        END IF;
        allowed := max_jobs;
        held := NULL;
        IF modes[array_position(locked, q)] = 'lane' THEN
            -- One lane: at most a share, and only while at most N - 4 shares run (see
            -- the top). Past that, claim nothing: the next claim takes all lanes.
            share := s.concurrency / (2 * lanes);
            SELECT count(*) INTO running FROM (
                SELECT 1 FROM {{schema}}.jobs AS r
                WHERE r.heartbeat_at IS NOT NULL AND r.status = 'running' AND r.queue = q
                LIMIT s.concurrency - lanes * share + 1) AS r;
            IF running > s.concurrency - lanes * share OR share < 1 THEN
                share := 0;
            END IF;
            IF share < allowed THEN
                allowed := share;
                held := 'share';
            END IF;
        ELSIF s.concurrency IS NOT NULL THEN
            SELECT count(*) INTO running FROM {{schema}}.jobs AS r
            WHERE r.heartbeat_at IS NOT NULL AND r.status = 'running' AND r.queue = q;
            IF s.concurrency - running < allowed THEN
                allowed := greatest(0, s.concurrency - running);
                held := 'slot';
            END IF;
        END IF;
        IF s.rate IS NOT NULL THEN
            -- The clock after the lock: now() is when our transaction began, maybe
            -- before the peer whose bucket we read took its tokens.
            clock := clock_timestamp();
            bucket := least(
                coalesce(s.burst, greatest(1, ceil(s.rate))),
                coalesce(s.tokens, s.burst, greatest(1, ceil(s.rate)))
                    + s.rate * greatest(0, extract(epoch FROM clock - coalesce(s.tokens_at, clock))));
            IF floor(bucket) < allowed THEN
                allowed := greatest(0, floor(bucket)::integer);
                held := 'rate';
            END IF;
        END IF;
        claimed := 0;
        IF allowed > 0 AND s.key_concurrency IS NOT NULL THEN
            after_key := coalesce(s.key_cursor, '');
            walk_max := allowed + 16;
            WITH RECURSIVE walk(k, n, wrapped) AS (
                SELECT f.k, 1, f.wrapped
                FROM (SELECT coalesce(a.k, (
                                 SELECT j.concurrency_key FROM {{schema}}.jobs AS j
                                 WHERE j.status = 'pending' AND j.concurrency_key IS NOT NULL
                                   AND j.queue = q
                                 ORDER BY j.concurrency_key LIMIT 1)) AS k,
                             a.k IS NULL AS wrapped
                      FROM (SELECT (
                                SELECT j.concurrency_key FROM {{schema}}.jobs AS j
                                WHERE j.status = 'pending' AND j.concurrency_key IS NOT NULL
                                  AND j.queue = q
                                  AND j.concurrency_key > after_key
                                ORDER BY j.concurrency_key LIMIT 1) AS k) AS a) AS f
                WHERE f.k IS NOT NULL
              UNION ALL
                SELECT nxt.k, w.n + 1, nxt.wrapped
                FROM walk AS w
                CROSS JOIN LATERAL (
                    SELECT coalesce(a.k, CASE WHEN NOT w.wrapped THEN (
                                   SELECT j.concurrency_key FROM {{schema}}.jobs AS j
                                   WHERE j.status = 'pending' AND j.concurrency_key IS NOT NULL
                                     AND j.queue = q
                                   ORDER BY j.concurrency_key LIMIT 1) END) AS k,
                           w.wrapped OR a.k IS NULL AS wrapped
                    FROM (SELECT (
                              SELECT j.concurrency_key FROM {{schema}}.jobs AS j
                              WHERE j.status = 'pending' AND j.concurrency_key IS NOT NULL
                                AND j.queue = q
                                AND j.concurrency_key > w.k
                              ORDER BY j.concurrency_key LIMIT 1) AS k) AS a
                ) AS nxt
                -- Stop back where we started: every key has had its turn.
                WHERE w.n < walk_max AND nxt.k IS NOT NULL
                  AND NOT (nxt.wrapped AND nxt.k > after_key)
            )
            SELECT array_agg(w.k ORDER BY w.n) INTO keys FROM walk AS w;
            keys := coalesce(keys, '{}');
            cut_at := CASE WHEN cardinality(keys) >= walk_max THEN keys[walk_max] END;
            RETURN QUERY
            WITH running AS (
                -- One pass over the running jobs (jobs_running_idx), counted per key.
                SELECT r.concurrency_key AS k, count(*)::integer AS n
                FROM {{schema}}.jobs AS r
                WHERE r.heartbeat_at IS NOT NULL AND r.status = 'running' AND r.queue = q
                  AND r.concurrency_key IS NOT NULL
                GROUP BY r.concurrency_key
            ),
            keyed AS (
                SELECT c.tid, c.id, c.priority, c.run_at, w.n::integer AS n, w.k
                FROM unnest(keys) WITH ORDINALITY AS w(k, n)
                LEFT JOIN running AS run ON run.k = w.k
                CROSS JOIN LATERAL (
                    SELECT j.ctid AS tid, j.id, j.priority, j.run_at
                    FROM {{schema}}.jobs AS j
                    WHERE j.status = 'pending' AND j.queue = q AND j.concurrency_key = w.k
                      AND j.run_at <= now()
                    ORDER BY j.priority DESC, j.run_at, j.id
                    LIMIT greatest(0, least(s.key_concurrency - coalesce(run.n, 0), allowed))
                    FOR UPDATE SKIP LOCKED
                ) AS c
            ),
            head AS (
                -- The queue's next pending jobs, not locked: the keyless among them are.
                SELECT j.ctid AS tid
                FROM {{schema}}.jobs AS j
                WHERE j.status = 'pending' AND hashtext(j.queue) = hashtext(q) AND j.queue = q
                  AND j.run_at <= now()
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT allowed
            ),
            keyless AS (
                SELECT j.ctid AS tid, j.id, j.priority, j.run_at, 0 AS n, NULL::text AS k
                FROM {{schema}}.jobs AS j
                WHERE j.ctid = ANY (ARRAY(SELECT head.tid FROM head))
                  AND j.status = 'pending' AND j.concurrency_key IS NULL AND j.queue = q
                  AND j.run_at <= now()
                FOR UPDATE OF j SKIP LOCKED
            ),
            chosen AS (
                SELECT t.tid, t.id, t.n, t.k
                FROM (
                    SELECT u.*, row_number() OVER (
                               PARTITION BY u.n ORDER BY u.priority DESC, u.run_at, u.id) AS turn
                    FROM (SELECT * FROM keyed UNION ALL SELECT * FROM keyless) AS u
                ) AS t
                ORDER BY t.priority DESC, t.turn, t.n
                LIMIT allowed
            ),
            moved AS (
                -- A queue limited only by its tasks' declaration keeps its cursor in the
                -- row its workers make at start (aiopgq/_worker/key_limits.py).
                UPDATE {{schema}}.queues AS c
                SET key_cursor = CASE
                    WHEN cut_at IS NOT NULL AND (SELECT count(*) FROM chosen) < allowed
                        THEN cut_at
                    ELSE coalesce((SELECT chosen.k FROM chosen WHERE chosen.k IS NOT NULL
                                   ORDER BY chosen.n DESC LIMIT 1), c.key_cursor) END
                WHERE c.queue = q
            )
            UPDATE {{schema}}.jobs AS j
            SET status = 'running', attempts = j.attempts + 1,
                locked_at = now(), locked_by = worker, heartbeat_at = now()
            FROM chosen
            WHERE j.ctid = chosen.tid AND j.id = chosen.id
            RETURNING j.id, j.queue, j.task, j.payload::text, j.priority, j.attempts,
                      j.max_attempts, date_part('epoch', j.run_at),
                      date_part('epoch', j.created_at), j.trace_context::text,
                      (j.metadata->'checkpoint')::text;
            GET DIAGNOSTICS claimed = ROW_COUNT;
            IF claimed < allowed THEN
                -- Keys at their limit, or keys not visited yet: go on at once only
                -- while claims make progress (a full turn of blocked keys waits).
                held := CASE WHEN cut_at IS NOT NULL AND claimed > 0 THEN 'keys' ELSE 'slot' END;
            END IF;
        ELSIF allowed > 0 THEN
            RETURN QUERY
            WITH next AS (
                SELECT j.ctid AS tid, j.id
                FROM {{schema}}.jobs AS j
                WHERE j.status = 'pending' AND hashtext(j.queue) = hashtext(q) AND j.queue = q
                  AND j.run_at <= now()
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT allowed
                FOR UPDATE SKIP LOCKED
            )
            UPDATE {{schema}}.jobs AS j
            SET status = 'running', attempts = j.attempts + 1,
                locked_at = now(), locked_by = worker, heartbeat_at = now()
            FROM next
            WHERE j.ctid = next.tid AND j.id = next.id
            RETURNING j.id, j.queue, j.task, j.payload::text, j.priority, j.attempts,
                      j.max_attempts, date_part('epoch', j.run_at),
                      date_part('epoch', j.created_at), j.trace_context::text,
                      (j.metadata->'checkpoint')::text;
            GET DIAGNOSTICS claimed = ROW_COUNT;
            IF claimed < allowed THEN
                held := NULL;  -- no runnable job left: no limit held us back
            END IF;
        END IF;
        IF s.rate IS NOT NULL AND claimed > 0 THEN
            UPDATE {{schema}}.queues AS c SET tokens = bucket - claimed, tokens_at = clock
            WHERE c.queue = q;
        END IF;
        max_jobs := max_jobs - claimed;
        -- A limit held jobs back: say when to look again, if a runnable job is left
        -- (the ones we claimed are `running` to this statement already).
        IF held IS NOT NULL AND EXISTS (
            SELECT 1 FROM {{schema}}.jobs AS p
            WHERE p.status = 'pending' AND hashtext(p.queue) = hashtext(q) AND p.queue = q
              AND p.run_at <= now()
        ) THEN
            RETURN QUERY SELECT NULL::bigint, q, 'limit'::text, NULL::text, NULL::integer,
                NULL::integer, NULL::integer,
                CASE held WHEN 'rate' THEN (1 - (bucket - claimed)) / s.rate
                          WHEN 'keys' THEN -1::double precision
                          WHEN 'share' THEN -1::double precision
                          ELSE 0::double precision END,
                NULL::double precision, NULL::text, NULL::text;
        END IF;
    END LOOP;
END
$function$;
