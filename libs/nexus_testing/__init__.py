"""A package marker: pytest then names test modules uniquely (each package has tests/)."""
