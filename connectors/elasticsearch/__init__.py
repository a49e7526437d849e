"""Elasticsearch 8: the bulk index/delete sink."""
