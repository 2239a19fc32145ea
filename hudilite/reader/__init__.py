"""The read path, engine-free (named `reader` so that `hudilite.read` stays the public function): snapshot, time
travel and incremental queries planned from the timeline, and the merging of base and log files. The Spark read
is hudilite.spark.read."""

from hudilite.reader.planner import ReadPlan, plan_read

__all__ = ["ReadPlan", "plan_read"]
