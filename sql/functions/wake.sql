CREATE OR REPLACE FUNCTION {{schema}}.wake_on_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    remembered pg_catalog.text;
BEGIN
    -- The payload size limit of new jobs (payload_limit.sql); a value copied from a table
    -- may arrive compressed, and is then measured decompressed (`|| '{}'` detoasts it).
    IF NEW.attempts = 0 AND (
           pg_column_size(NEW.payload) > {{schema}}.payload_limit()
           OR (pg_column_compression(NEW.payload) IS NOT NULL
               AND pg_column_size(NEW.payload || '{}'::jsonb) > {{schema}}.payload_limit())) THEN
        RAISE EXCEPTION 'payload of task % is % bytes, over the limit of % bytes of schema %',
                NEW.task, pg_column_size(NEW.payload || '{}'::jsonb), {{schema}}.payload_limit(),
                '{{schema_name}}'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_payload_max_bytes',
                  HINT = 'store large data elsewhere and pass a reference, or have the '
                         'schema''s owner raise the limit: SELECT {{schema_name}}.set_max_payload_bytes(n)';
    END IF;
    IF current_setting('aiopgq.decided_{{schema_name}}', true) IS NOT DISTINCT FROM NEW.queue
       OR NEW.status <> 'pending' OR NEW.run_at > now() THEN
        RETURN NEW;  -- this transaction decided for the queue already, or nothing runnable
    END IF;
    -- Steps 1 and 2 of 0003_notify_once.sql, nested because SQL promises no
    -- evaluation order and the registration must come first.
    IF pg_try_advisory_xact_lock_shared(hashtext('{{schema_name}}:skip'), hashtext(NEW.queue)) THEN
        IF NOT pg_try_advisory_xact_lock(hashtext('{{schema_name}}:awake'), hashtext(NEW.queue)) THEN
            RETURN NEW;  -- covered by an awake worker or a producer already notifying
        END IF;
    END IF;
    remembered := set_config('aiopgq.decided_{{schema_name}}', NEW.queue, true);
    PERFORM pg_notify('{{schema_name}}', NEW.queue)
    WHERE NOT EXISTS (
        SELECT 1 FROM {{schema}}.queues s WHERE s.queue = NEW.queue AND NOT s.notify);
    RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION {{schema}}.wake_once(q text, run_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    remembered pg_catalog.text;
BEGIN
    IF run_at > now()
       OR current_setting('aiopgq.decided_{{schema_name}}', true) IS NOT DISTINCT FROM q THEN
        RETURN true;
    END IF;
    IF pg_try_advisory_xact_lock_shared(hashtext('{{schema_name}}:skip'), hashtext(q)) THEN
        IF NOT pg_try_advisory_xact_lock(hashtext('{{schema_name}}:awake'), hashtext(q)) THEN
            remembered := set_config('aiopgq.decided_{{schema_name}}', q, true);
            RETURN true;
        END IF;
    END IF;
    remembered := set_config('aiopgq.decided_{{schema_name}}', q, true);
    PERFORM pg_notify('{{schema_name}}', q)
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queues s WHERE s.queue = q AND NOT s.notify);
    RETURN true;
END
$function$;

CREATE OR REPLACE TRIGGER jobs_wake BEFORE INSERT ON {{schema}}.jobs
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.wake_on_insert();
