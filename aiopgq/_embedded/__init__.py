"""The embedded PostgreSQL server (an optional extra): binaries, account, data folder,
supervisor process. It imports nothing of aiopgq but its errors and identifier rule."""
