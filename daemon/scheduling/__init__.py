"""Who runs when in the daemon's one process: the cycle's own thread, behind requests, and
the cycle's statements giving way to the API's requests in flight."""
