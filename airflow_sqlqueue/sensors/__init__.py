"""Sensors of the SQL queue provider."""
