"""Worker processes: the fork server, the pool with its one priority queue, and how many workers fit."""
