"""The worker runtime: fetcher, dispatcher, completer, listener, heartbeat, maintenance.

`worker.py` wires the parts together; none of them imports the client (Queue, Task):
they see it through the small Protocols in `contracts.py`.
"""
