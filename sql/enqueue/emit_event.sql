-- Emit an event (queue.emit_event): sql/functions/events.sql. Returns how many waiting
-- jobs it woke.
SELECT {{schema}}.emit_event($1::text, $2::text::jsonb);
