"""The client: one Queue composed of parts (enqueue, admin, read, results, hooks), and SyncQueue."""
