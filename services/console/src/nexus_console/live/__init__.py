"""Live updates: the streams followed by ordered consumers, fanned out to open pages as
server-sent events."""
