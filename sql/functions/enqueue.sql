-- Enqueue one job from SQL, with the task's registered defaults and argument checks:
--   SELECT aiopgq.enqueue('send_email', '{"to": "a@example.com"}');
--   SELECT aiopgq.enqueue('report', '{}', concurrency_key => 'customer-42');
--   SELECT aiopgq.enqueue('notify', '{}', depends_on => ARRAY[41, 42]);
-- queue, priority and max_attempts default to the task's row in the registry (tasks,
-- written by the workers that serve it), else 'default', 0 and 5. While the registry is
-- not empty it refuses a task no worker registered (SQLSTATE P0002, no_data_found),
-- naming the known ones, and a payload whose keys do not fit the task's arguments
-- (22023, invalid_parameter_value); an empty registry accepts any name.
-- With an idempotency_key it goes through enqueue_unique() (unique_for, on_conflict) and
-- returns the id of the new job or of the job holding the key.
-- With depends_on (job ids) the job waits until they are all done
-- (add_dependencies(), dependencies.sql; on_parent_failure 'cancel' or 'run'); it
-- takes no idempotency_key (the job returned could be one enqueued before, without
-- those parents).
-- With sequence_key the job runs after the jobs enqueued before it with that key, one at
-- a time (add_to_sequence(), sequences.sql); it takes no idempotency_key either.
--   SELECT aiopgq.enqueue('sync_account', '{}', sequence_key => 'account-7');
-- It runs as its caller (EXECUTE is PUBLIC's): the caller's grants on jobs decide, and
-- enqueued_by stays the caller.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue(task text, payload jsonb DEFAULT '{}'::jsonb,
    queue text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT now(),
    priority integer DEFAULT NULL::integer, max_attempts integer DEFAULT NULL::integer,
    idempotency_key text DEFAULT NULL::text, unique_for interval DEFAULT NULL::interval,
    on_conflict text DEFAULT 'ignore'::text, concurrency_key text DEFAULT NULL::text,
    depends_on bigint[] DEFAULT NULL::bigint[], on_parent_failure text DEFAULT 'cancel'::text,
    sequence_key text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    declared {{schema}}.tasks%ROWTYPE;
    known text;
    new_id bigint;
BEGIN
    SELECT * INTO declared FROM {{schema}}.tasks t WHERE t.name = enqueue.task;
    IF NOT FOUND THEN
        SELECT string_agg(t.name, ', ' ORDER BY t.name) INTO known FROM {{schema}}.tasks t;
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'no task named % is registered (known: %)',
                quote_literal(enqueue.task), known
                USING ERRCODE = 'no_data_found',
                      HINT = 'check the name, or start a worker whose queue registers the task';
        END IF;
    ELSIF NOT declared.any_keyword OR NOT coalesce(enqueue.payload, '{}') ?& declared.required THEN
        SELECT string_agg(quote_literal(k), ', ') INTO known
        FROM jsonb_object_keys(coalesce(enqueue.payload, '{}')) AS k
        WHERE NOT declared.any_keyword AND k <> ALL (declared.arguments);
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'task %: unexpected argument(s) %', enqueue.task, known
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('the task takes %s', array_to_string(declared.arguments, ', '));
        END IF;
        SELECT string_agg(quote_literal(r), ', ') INTO known
        FROM unnest(declared.required) AS r
        WHERE NOT coalesce(enqueue.payload, '{}') ? r;
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'task %: missing required argument(s) %', enqueue.task, known
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('the task takes %s', array_to_string(declared.arguments, ', '));
        END IF;
    END IF;
    IF enqueue.idempotency_key IS NULL THEN
        IF enqueue.unique_for IS NOT NULL OR enqueue.on_conflict IS DISTINCT FROM 'ignore' THEN
            RAISE EXCEPTION 'unique_for and on_conflict need an idempotency_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        INSERT INTO {{schema}}.jobs (task, payload, queue, run_at, priority, max_attempts,
                                     concurrency_key)
        VALUES (enqueue.task, coalesce(enqueue.payload, '{}'::jsonb),
                coalesce(enqueue.queue, declared.queue, 'default'),
                coalesce(enqueue.run_at, now()),
                coalesce(enqueue.priority, declared.priority, 0),
                coalesce(enqueue.max_attempts, declared.max_attempts, 5),
                enqueue.concurrency_key)
        RETURNING id INTO new_id;
        IF enqueue.depends_on IS NOT NULL THEN
            PERFORM {{schema}}.add_dependencies(ARRAY[new_id], enqueue.depends_on,
                                               enqueue.on_parent_failure);
        END IF;
        IF enqueue.sequence_key IS NOT NULL THEN
            PERFORM {{schema}}.add_to_sequence(ARRAY[new_id], enqueue.sequence_key);
        END IF;
        RETURN new_id;
    END IF;
    IF enqueue.sequence_key IS NOT NULL THEN
        RAISE EXCEPTION 'sequence_key takes no idempotency_key: the job holding the key may have been enqueued outside the sequence'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.depends_on IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on takes no idempotency_key: the job holding the key may have been enqueued without those parents'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT u.id INTO new_id
    FROM {{schema}}.enqueue_unique(
        enqueue.task, jsonb_build_array(coalesce(enqueue.payload, '{}'::jsonb)),
        ARRAY[enqueue.idempotency_key], coalesce(enqueue.queue, declared.queue, 'default'),
        coalesce(enqueue.priority, declared.priority, 0), enqueue.run_at,
        coalesce(enqueue.max_attempts, declared.max_attempts, 5),
        enqueue.unique_for, enqueue.on_conflict) AS u;
    IF enqueue.concurrency_key IS NOT NULL THEN
        -- enqueue_unique() takes no key: set it in this transaction, as Queue.enqueue does
        -- (sql/enqueue/set_concurrency_key.sql), before any claim can see the job.
        UPDATE {{schema}}.jobs j SET concurrency_key = enqueue.concurrency_key
        WHERE j.id = new_id;
    END IF;
    RETURN new_id;
END
$function$;
