"""The ground floor: bounded caches, hashing, input limits, quiet imports, safe files, private copies.

Nothing here knows about models, rules or ExecuTorch; every other folder may use it."""
