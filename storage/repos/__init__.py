"""Repositories: each one the reads and writes of one collection (or one document of
``settings``) for the feature that owns it, so callers never build MongoDB queries
themselves. Storage never imports the agent: what comes back is plain data."""
