"""Marks the directory as a package so pytest names test modules uniquely.

Every package has a tests/ directory; this makes ours services.scheduler.tests.
"""
