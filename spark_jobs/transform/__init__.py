"""Stage 2 of a window, in the read task: the pipeline's chain of transforms over the decoded changes.

``row_transforms.apply`` runs the chain step by step on the typed row images (``row_unwrap``,
``row_steps``, ``row_nested``, ``row_keys``, ``row_casts``, ``row_timestamps``, with the Java patterns
and regexes of ``java_dates``, ``java_regex``, ``row_patterns``); what a chain is (which chains
can run, what schema it leaves, what each stage asks of it) is ``spark_jobs/chains.py``, below the stages; ``transform_config`` holds the steps' config models.
Only ``SqlExpression``, ``Sql`` predicates and ``Python`` leave the worker: ``spark_stage`` runs them
in Spark between the row steps."""
