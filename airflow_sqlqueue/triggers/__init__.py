"""Triggers of the SQL queue provider."""
