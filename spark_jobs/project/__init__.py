"""Stage 3 of a window, in the read task: the changes sorted out by sink target (``targets.py``),
projected onto a table's columns (``tables.py``), a partial change filled in (``partial.py``), reduced
to the last change per key and packed for the writers; the seeds and documents of composed indices
(``compose.py``)."""
