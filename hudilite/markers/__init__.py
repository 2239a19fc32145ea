"""Markers: a record of every data file a write creates, made before the file, for rollback."""

from hudilite.markers.direct import (
    CREATE, MERGE, APPEND, DirectMarkers, marker_dir, list_markers, delete_markers,
)

__all__ = ["CREATE", "MERGE", "APPEND", "DirectMarkers", "marker_dir", "list_markers", "delete_markers"]
