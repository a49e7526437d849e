"""Spark jobs: pure DataFrame functions (debezium) and the consume-window job (cdc_window)."""
