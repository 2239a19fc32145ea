"""Indexes route each incoming record key to the file group that already holds it."""

from hudilite.index.range_index import FileRange, RangeIndex

__all__ = ["FileRange", "RangeIndex"]
