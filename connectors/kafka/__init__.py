"""Kafka: the range reader (source), the dead-letter reporter and the consumer-group mirror."""
