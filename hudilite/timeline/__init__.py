"""The timeline: instants (requested -> inflight -> completed), their files and metadata."""

from hudilite.timeline.instant import (
    CLEAN,
    CLUSTERING,
    COMMIT,
    COMPACTION,
    COMPLETED,
    DELTA_COMMIT,
    INFLIGHT,
    REPLACE_COMMIT,
    REQUESTED,
    ROLLBACK,
    WRITE_ACTIONS,
    Instant,
)
from hudilite.timeline.timeline import Timeline

__all__ = [
    "COMMIT", "DELTA_COMMIT", "REPLACE_COMMIT", "CLEAN", "ROLLBACK", "COMPACTION", "CLUSTERING",
    "REQUESTED", "INFLIGHT", "COMPLETED", "WRITE_ACTIONS", "Instant", "Timeline",
]
