CREATE OR REPLACE FUNCTION {{schema}}.wake_on_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    remembered pg_catalog.text;
BEGIN
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
