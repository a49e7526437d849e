"""Stage 1 of a window, in the read task: a partition range read from Kafka (``ranges.py``) and
decoded by the pipeline's ``source.format`` and converters into typed change columns (``decode.py``)."""
