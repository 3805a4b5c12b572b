"""Operations: reading a queue's database for people and machines (doctor, top, workers).

A room beneath the client: it reads through a connection and the SQL in sql/ops/,
needs no Queue, Task or worker, and imports only aiopgq._db and the foundation
modules (tests/test_layers.py), so the CLI and a dashboard can both use it.
"""
