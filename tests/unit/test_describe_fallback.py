"""A Connect server without `DESCRIBE ... AS JSON` (Spark < 4.0) is remembered per session, and only while the
session lives (hudilite/metastore.py `_described_json`)."""

import gc
import weakref

from pyspark.errors import ParseException

from hudilite import metastore as ms


class _Session:  # stands for a Connect session: hashable and weakly referenceable, as PySpark's is
    pass


def test_the_text_fallback_is_remembered_per_session_and_dropped_with_it(monkeypatch):
    sent = []

    def old_server(spark, statement):
        sent.append(statement)
        raise ParseException(message=f"[PARSE_SYNTAX_ERROR] Syntax error at or near 'AS': {statement}")

    monkeypatch.setattr(ms, "command_rows", old_server)
    monkeypatch.setattr(ms, "_NO_JSON_DESCRIBE", weakref.WeakSet())
    a, b = _Session(), _Session()
    assert ms._described_json(a, "s.t") == ({}, "", None)
    assert ms._described_json(a, "s.u") == ({}, "", None)
    assert len(sent) == 1  # the second describe of `a` goes to the text statements at once
    assert ms._described_json(b, "s.t") == ({}, "", None)
    assert len(sent) == 2  # another session (maybe another server) asks for itself
    assert len(ms._NO_JSON_DESCRIBE) == 2
    del a, b
    gc.collect()
    assert len(ms._NO_JSON_DESCRIBE) == 0  # a long-lived process opening sessions keeps nothing of closed ones
