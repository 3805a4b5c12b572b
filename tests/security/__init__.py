"""Security: each attack of the threat model reproduced through real roles and processes."""
