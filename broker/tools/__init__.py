"""The console tools (``python -m broker.tools``: produce, consume, topics,
offsets, groups), all in __main__.py."""
