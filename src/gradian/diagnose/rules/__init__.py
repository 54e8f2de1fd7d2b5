"""Importing this package registers every rule (dataset D1xx, config C2xx, logs L3xx, cross-cutting X4xx)."""

from gradian.diagnose.rules import config, cross, dataset, logs  # noqa: F401
