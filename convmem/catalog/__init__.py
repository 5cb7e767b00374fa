"""The store's in-memory state: the message catalog (slots and docs), sessions, relations and
the compiled search index, with the operations that apply records to them (catalog.py)."""
