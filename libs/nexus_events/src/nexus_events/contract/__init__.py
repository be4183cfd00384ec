"""The contract itself: subjects, streams, the envelope, the run state machine, who may publish
what, and the pure validation of what travels."""
