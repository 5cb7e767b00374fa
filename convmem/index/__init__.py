"""In-memory state beside the compiled search index: message catalog, sessions, relations."""
