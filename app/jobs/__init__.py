"""Jobs: long work (a sweep's points, an async plan) stored in the database and run by a worker."""
