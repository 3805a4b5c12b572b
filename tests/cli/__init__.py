"""The `aiopgq` command line, run as a user runs it: commands, messages, exit statuses."""
