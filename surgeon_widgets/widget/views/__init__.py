"""The Python side of the front end's views (``js/src``'s folders): the tree panel and its rows,
the cut panel, figures, attention tokens, the error list."""
