"""Importing this package registers every rule (dataset D1xx, content D128+, config C2xx, logs L3xx, cross X4xx)."""

from gradian.diagnose.rules import config, content, cross, dataset, logs  # noqa: F401
