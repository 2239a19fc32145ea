"""The read path (named `reader` so that `hudilite.read` stays the public function): snapshot, time travel and incremental queries planned from the timeline."""

from hudilite.reader.planner import ReadPlan, plan_read
from hudilite.reader.spark_read import read

__all__ = ["ReadPlan", "plan_read", "read"]
