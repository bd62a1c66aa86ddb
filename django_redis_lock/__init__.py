"""Distributed locks for Django on the project's Redis cache."""
