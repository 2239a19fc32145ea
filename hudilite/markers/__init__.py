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
)
from hudilite.options import MARKERS_SERVICE_URL, MARKERS_TYPE


def markers_for(base_path: str, instant: str, options: dict | None = None):
    """The markers executors should use for `instant`: `ServiceMarkers` when the write options select
    `hoodie.write.markers.type=TIMELINE_SERVER_BASED` and name a running service in
    `hoodie.write.markers.service.url`, else `DirectMarkers`. Both are picklable."""
    kind = MARKERS_TYPE.get(options).strip().upper()
    url = MARKERS_SERVICE_URL.get(options)
    if kind == TIMELINE_SERVER_BASED and url:
        return ServiceMarkers(str(url), base_path, instant)
    return DirectMarkers(base_path, instant)


__all__ = [
    "CREATE", "MERGE", "APPEND", "DirectMarkers", "marker_dir", "list_markers", "delete_markers",
    "MarkerService", "ServiceMarkers", "MarkerServiceError", "MarkerExistsError", "markers_for",
    "DIRECT", "TIMELINE_SERVER_BASED", "OPT_MARKERS_TYPE", "OPT_SERVICE_URL", "OPT_BATCH_INTERVAL_MS",
    "OPT_NUM_THREADS",
]
