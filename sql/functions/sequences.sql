-- Sequences (sequence_key=): jobs of one key run one at a time, in enqueue order,
-- fleet-wide; one that ends failed holds the rest of its sequence until it is retried
-- (and done) or cancelled; a cancelled one lets the sequence go on past it.
--
-- The design: a sequence is a chain of dependencies made at enqueue. Each job of a key
-- waits (status 'waiting', as with depends_on) on the job enqueued before it, by an edge
-- of kind 'sequence' in job_dependencies (dependencies.sql): it is released by the
-- statement that finishes that job, like any dependency. Such an edge differs in what an
-- end other than done does: a failed parent HOLDS the child (it stays waiting, the edge
-- reopens when the parent is retried: revive_dependents()), a cancelled one lets it go
-- on, past the cancelled job: splice_sequences() gives the child the cancelled job's own
-- predecessor instead. So the claim path pays nothing (a waiting job is not claimable;
-- the dequeue statements are unchanged) and no poller is needed.
--
-- One table, sequences(key, last_job_id): the key's newest job. Why this is right under
-- concurrency:
-- - Enqueues of one key are ordered by its row: add_to_sequence() locks it (FOR UPDATE,
--   inserting it the first time; ON CONFLICT DO NOTHING waits for a concurrent insert of
--   the key and the loop then locks the row that one committed) before it reads
--   last_job_id, and points it at its own newest job before it commits. A concurrent
--   enqueue of the key waits, then reads the new last_job_id: every job of a key has
--   exactly one predecessor (the one enqueued just before it, or none), and the order
--   is the commit order of the enqueues, the rows' order within one.
-- - Enqueue against the predecessor's end: sequence_predecessors() locks the predecessor's
--   row (FOR NO KEY UPDATE) before reading its status, as add_dependencies() does. Its
--   completion, if it came first, is then visible (done: no edge, the job is pending at
--   once; failed: the edge is written failed and holds); if it comes second, its UPDATE
--   waits for the enqueue's commit and re-reads the row, `dependents` included, and its
--   settle_dependents() (new snapshots) sees the new edge.
-- - A cancelled job is passed over: the predecessor of a job whose predecessor is
--   cancelled is that one's own live (or failed) predecessor, found by the same locked
--   walk. When a job is cancelled, splice_sequences() gives each job that waits on it by
--   a sequence edge the cancelled one's predecessor, locked first, so the new edge is
--   ordered against that job's end by the same argument. The user's cancel (cancel.sql)
--   locks that predecessor before the job it cancels (lock_sequence_parents()), in the
--   order a completion takes (parent, then children), so a cancel and the predecessor's
--   completion do not deadlock; a cascade (depends_on) cancelling a sequenced job inside
--   a completion can, rarely: PostgreSQL aborts one statement and the worker writes its
--   outcomes again (40P01 is transient; dependencies.sql).
-- - A job that ends failed with attempts left goes back to pending and settles nothing:
--   its successor keeps waiting (rescue of a crashed job too). One that ends failed for
--   good settles its edges failed: its successor is held. queue.retry() reopens the
--   edges (revive_dependents()); its next done releases the successor. queue.cancel() of
--   the failed job (cancel.sql accepts a failed job of a sequence) settles them
--   cancelled: the successor goes on.
-- - depends_on on the same job: both edges must be satisfied. A depends_on parent that is
--   also the job's predecessor has one edge of kind 'both': cancel (policy "cancel") on
--   its failure, else hold.
--
-- Retention: prune.sql and archive_move.sql keep a failed job that holds a waiting
-- successor and a cancelled job that a key names as its newest (the next enqueue walks
-- past it), and delete a key's row with the job it names; a predecessor no longer in jobs
-- (so done, or finished with nothing waiting on it) counts as done.
-- Limits: queue.retry() of a cancelled
-- job of a sequence runs it at once, outside the order (retry's rule for jobs with
-- parents). The running job's cancel releases its successor while the handler may still be
-- stopping (it hears of the cancel at once, or at its next heartbeat).
--
-- DECLARE sections name pg_catalog's types: add_to_sequence() runs the others as the
-- schema's owner (wake.sql says why).

-- The jobs a successor of job `start` must wait on, each locked (FOR NO KEY UPDATE) before
-- its status is read: `start` itself when it is live or failed, none when it is done or
-- gone, and when it is cancelled, its own predecessors', found the same way.
CREATE OR REPLACE FUNCTION {{schema}}.sequence_predecessors(start bigint)
 RETURNS TABLE(id bigint, status text)
 LANGUAGE plpgsql
 STRICT
AS $function$
#variable_conflict use_column
DECLARE
    found_status pg_catalog.text;
    before pg_catalog.int8;
BEGIN
    SELECT j.status::text INTO found_status FROM {{schema}}.jobs j
    WHERE j.id = sequence_predecessors.start FOR NO KEY UPDATE OF j;
    IF found_status IS NULL OR found_status = 'done' THEN
        RETURN;
    END IF;
    IF found_status <> 'cancelled' THEN
        id := sequence_predecessors.start;
        status := found_status;
        RETURN NEXT;
        RETURN;
    END IF;
    FOR before IN
        SELECT d.parent_id FROM {{schema}}.job_dependencies d
        WHERE d.child_id = sequence_predecessors.start AND d.kind <> 'parent'
          AND (d.outcome IS NULL OR d.outcome = 'failed')
        ORDER BY d.parent_id
    LOOP
        RETURN QUERY SELECT * FROM {{schema}}.sequence_predecessors(before);
    END LOOP;
END
$function$;

-- Give `child` the sequence edges to `predecessors` (the result of
-- sequence_predecessors()): open, or failed (holding) for a failed one. A depends_on edge
-- to the same job becomes 'both'. Returns whether it has any such edge now.
CREATE OR REPLACE FUNCTION {{schema}}.link_sequence(child bigint, predecessors bigint[],
    statuses text[])
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF predecessors IS NULL OR cardinality(predecessors) = 0 THEN
        RETURN false;
    END IF;
    INSERT INTO {{schema}}.job_dependencies AS d (child_id, parent_id, outcome, kind)
    SELECT link_sequence.child, p.id,
           CASE WHEN p.status = 'failed' THEN 'failed'::{{schema}}.job_status END, 'sequence'
    FROM unnest(predecessors, statuses) AS p(id, status)
    ON CONFLICT (child_id, parent_id) DO UPDATE
        SET kind = CASE WHEN d.kind = 'parent' THEN 'both' ELSE d.kind END;
    UPDATE {{schema}}.jobs j
    SET metadata = coalesce(j.metadata, '{}') || '{"dependents": true}'
    WHERE j.id = ANY(predecessors) AND NOT coalesce(j.metadata ? 'dependents', false);
    RETURN true;
END
$function$;

-- Jobs `cancelled` were cancelled: the jobs that wait on one of them by a sequence edge
-- wait on its predecessor instead (called by settle_dependents() before it decides them).
CREATE OR REPLACE FUNCTION {{schema}}.splice_sequences(cancelled bigint[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    gone pg_catalog.int8;
    successor pg_catalog.int8;
    ids pg_catalog.int8[];
    statuses pg_catalog.text[];
BEGIN
    FOR gone IN
        SELECT DISTINCT d.parent_id FROM {{schema}}.job_dependencies d
        WHERE d.parent_id = ANY(cancelled) AND d.kind <> 'parent'
        ORDER BY d.parent_id
    LOOP
        SELECT array_agg(p.id ORDER BY p.id), array_agg(p.status ORDER BY p.id)
        INTO ids, statuses
        FROM {{schema}}.sequence_predecessors(gone) AS p;
        CONTINUE WHEN ids IS NULL;
        FOR successor IN
            SELECT d.child_id FROM {{schema}}.job_dependencies d
            WHERE d.parent_id = gone AND d.kind <> 'parent'
            ORDER BY d.child_id
        LOOP
            PERFORM {{schema}}.link_sequence(successor, ids, statuses);
        END LOOP;
    END LOOP;
END
$function$;

-- Before cancel.sql locks job `job`: lock the jobs it waits on by a sequence edge, in the
-- order a completion locks (parent, then child). Always true.
CREATE OR REPLACE FUNCTION {{schema}}.lock_sequence_parents(job bigint)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM FROM {{schema}}.jobs j
    WHERE j.id IN (SELECT d.parent_id FROM {{schema}}.job_dependencies d
                   WHERE d.child_id = lock_sequence_parents.job AND d.kind <> 'parent'
                     AND (d.outcome IS NULL OR d.outcome = 'failed'))
    ORDER BY j.id
    FOR NO KEY UPDATE OF j;
    RETURN true;
END
$function$;

-- Put new jobs `children` (just enqueued by the caller, in this order) at the end of the
-- sequence `sequence_key`: each waits on the one before it (the first on the key's newest
-- job), or is pending at once when that one is done. Runs after add_dependencies() when
-- the jobs have parents too. Returns each job's status, in `children`'s order.
-- SECURITY DEFINER: a producer may neither lock nor update jobs, nor read the sequences
-- table; it may sequence only new jobs it enqueued (enqueued_by), and what it does to the
-- key's earlier jobs is to mark them as having dependents. Its search_path ends in pg_temp
-- (sql/README.md: definer functions).
CREATE OR REPLACE FUNCTION {{schema}}.add_to_sequence(children bigint[], sequence_key text)
 RETURNS TABLE(id bigint, status text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    seq_key pg_catalog.text := add_to_sequence.sequence_key;
    refused pg_catalog.int8;
    prev pg_catalog.int8;
    child pg_catalog.int8;
    ids pg_catalog.int8[];
    statuses pg_catalog.text[];
    linked pg_catalog.int8[];
BEGIN
    IF seq_key IS NULL OR seq_key = '' OR length(seq_key) > 200 THEN
        RAISE EXCEPTION 'sequence_key must be a non-empty string of at most 200 characters, got %',
                coalesce(quote_literal(left(seq_key, 210)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF children IS NULL OR cardinality(children) = 0 THEN
        RETURN;
    END IF;
    PERFORM FROM {{schema}}.jobs j WHERE j.id = ANY(children) ORDER BY j.id
    FOR NO KEY UPDATE OF j;
    SELECT c INTO refused
    FROM unnest(children) AS c
    LEFT JOIN {{schema}}.jobs j ON j.id = c
    WHERE j.id IS NULL OR j.status NOT IN ('pending', 'waiting', 'cancelled')
       OR j.attempts <> 0 OR j.idempotency_key IS NOT NULL
       OR coalesce(j.metadata ? 'sequence', false)
       OR NOT (j.enqueued_by = session_user
               OR has_table_privilege(session_user, '{{schema}}.jobs'::regclass, 'UPDATE'))
    LIMIT 1;
    IF refused IS NOT NULL OR cardinality(children) <> (
            SELECT count(DISTINCT c) FROM unnest(children) AS c) THEN
        RAISE EXCEPTION 'job % cannot join a sequence: only a new job of yours can (never run, without an idempotency key, in no sequence yet, named once)', coalesce(refused::text, 'named twice')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The key's row, locked: this orders the enqueues of one key (the header).
    LOOP
        SELECT s.last_job_id INTO prev FROM {{schema}}.sequences s WHERE s.key = seq_key
        FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {{schema}}.sequences AS s (key, last_job_id)
        VALUES (seq_key, children[1]) ON CONFLICT DO NOTHING;
        IF FOUND THEN
            prev := NULL;
            EXIT;
        END IF;
    END LOOP;
    FOREACH child IN ARRAY children LOOP
        IF prev IS NOT NULL THEN
            SELECT array_agg(p.id ORDER BY p.id), array_agg(p.status ORDER BY p.id)
            INTO ids, statuses
            FROM {{schema}}.sequence_predecessors(prev) AS p;
            IF {{schema}}.link_sequence(child, ids, statuses) THEN
                linked := array_append(linked, child);
            END IF;
        END IF;
        prev := child;
    END LOOP;
    UPDATE {{schema}}.sequences s SET last_job_id = prev WHERE s.key = seq_key;
    UPDATE {{schema}}.jobs j
    SET metadata = coalesce(j.metadata, '{}') || jsonb_build_object('sequence', seq_key),
        status = CASE WHEN j.id = ANY(linked) AND j.status = 'pending'
                      THEN 'waiting'::{{schema}}.job_status ELSE j.status END
    WHERE j.id = ANY(children);
    IF linked IS NOT NULL THEN
        PERFORM {{schema}}.settle_children(linked);
    END IF;
    RETURN QUERY
    SELECT j.id, j.status::text
    FROM unnest(children) WITH ORDINALITY AS c(id, n)
    JOIN {{schema}}.jobs j ON j.id = c.id
    ORDER BY c.n;
END
$function$;
REVOKE ALL ON FUNCTION {{schema}}.add_to_sequence(bigint[], text) FROM PUBLIC;
