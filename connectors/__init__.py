"""One folder per external system: kafka (source, DLQ, group mirror), mysql (sink).

Sinks follow the small interface in :mod:`connectors.base`.
"""
