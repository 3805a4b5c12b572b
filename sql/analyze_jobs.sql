-- Fresh statistics for jobs (see statistics_outgrown.sql).
ANALYZE {{schema}}.jobs;
