"""The ground floor: bounded caches, hashing, input limits, quiet imports, safe files, private copies,
the result store on disk.

Nothing here knows about models, rules or ExecuTorch; every other folder may use it."""
