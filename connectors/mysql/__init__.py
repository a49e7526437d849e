"""MySQL (and MariaDB): the upsert/delete sink."""
