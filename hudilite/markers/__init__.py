"""Markers: a record of every data file a write creates, made before the file, for rollback."""

from hudilite.markers.direct import (
    APPEND,
    CREATE,
    MERGE,
    DirectMarkers,
    delete_markers,
    list_markers,
    marker_dir,
)
from hudilite.markers.service import (
    DIRECT,
    OPT_BATCH_INTERVAL_MS,
    OPT_MARKERS_TYPE,
    OPT_NUM_THREADS,
    OPT_SERVICE_URL,
    TIMELINE_SERVER_BASED,
    MarkerExistsError,
    MarkerService,
    MarkerServiceError,
    ServiceMarkers,
    marker_type,
)
from hudilite.options import MARKERS_SERVICE_URL


def markers_for(base_path: str, instant: str, options: dict | None = None):
    """The markers executors should use for `instant`: `ServiceMarkers` when the marker type (`marker_type`:
    the write options' `hoodie.write.markers.type`, else by the table's storage) is TIMELINE_SERVER_BASED and
    `hoodie.write.markers.service.url` names a running service, else `DirectMarkers`. Both are picklable."""
    kind = marker_type(base_path, options)
    url = MARKERS_SERVICE_URL.get(options)
    if kind == TIMELINE_SERVER_BASED and url:
        return ServiceMarkers(str(url), base_path, instant)
    return DirectMarkers(base_path, instant)


__all__ = [
    "CREATE", "MERGE", "APPEND", "DirectMarkers", "marker_dir", "list_markers", "delete_markers",
    "MarkerService", "ServiceMarkers", "MarkerServiceError", "MarkerExistsError", "markers_for",
    "DIRECT", "TIMELINE_SERVER_BASED", "OPT_MARKERS_TYPE", "OPT_SERVICE_URL", "OPT_BATCH_INTERVAL_MS",
    "OPT_NUM_THREADS", "marker_type",
]
