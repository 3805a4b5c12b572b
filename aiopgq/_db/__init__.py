"""Database plumbing: statements, migrations, pool, DSN, poolers, transient errors.

It imports nothing of the client (Queue, Task) or the worker runtime.
"""
