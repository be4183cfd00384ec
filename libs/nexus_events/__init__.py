"""Marks the directory as a package so pytest names test modules uniquely (every package has a tests/)."""
