"""Operators for SQL queue tables."""
