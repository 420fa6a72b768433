"""The Python side of the front end's views (``js/src``'s folders): tree rows, the cut panel,
figures, attention tokens, the error list."""
