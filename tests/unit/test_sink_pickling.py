"""A streaming sink pickled for Spark Connect's foreachBatch (the server's Python worker calls the copy): the
layout survives - `UNSET` unpickles as itself, which the writer tests by identity - and the copy completes
each batch's commit before returning, with a fresh run state."""

import pickle

from pyspark import cloudpickle

import hudilite.streaming as hs
from hudilite.writer.options import UNSET


def test_unset_unpickles_as_itself():
    assert pickle.loads(pickle.dumps(UNSET)) is UNSET
    assert cloudpickle.loads(cloudpickle.dumps(UNSET)) is UNSET


def test_a_pickled_sink_is_a_blocking_copy_with_the_same_layout(tmp_path):
    sink = hs.sink(str(tmp_path / "t"), record_key="id", partition_by=("dt",),
                   options={"hoodie.parquet.small.file.limit": "0"}, checkpoint_location=str(tmp_path / "chk"))
    sink.committed.append((0, "20260101000000000"))
    copy = cloudpickle.loads(cloudpickle.dumps(sink))
    assert copy.async_instants is False and sink.async_instants is True
    assert copy._writer.layout == sink._writer.layout and copy._writer.layout["precombine_field"] is UNSET
    assert (copy.path, copy.options, copy.checkpoint_location) == (sink.path, sink.options, sink.checkpoint_location)
    assert copy.committed == [] and copy._committer is None
    copy.close()
