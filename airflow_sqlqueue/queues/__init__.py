"""Queues of the SQL queue provider."""
