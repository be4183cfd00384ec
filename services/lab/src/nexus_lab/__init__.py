"""The lab service (docs/lab.md): eval runs of suites over agent revisions."""
