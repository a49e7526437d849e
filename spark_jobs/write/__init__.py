"""Stages 4 and 5 of a window: on the driver, the dead letters (``dead_letters.py``) and the targets
made ready (``prepare.py``: tables and indices created or evolved; ``sinks.py``: the sink types and
the tables a sink's changes go to); then the write tasks (``tasks.py``)."""
