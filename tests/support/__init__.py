"""Helpers shared by the tests, one module per kind."""
