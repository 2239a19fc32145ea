"""Which columns base files and Parquet log blocks dictionary-encode (hudilite/writer/handle.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from hudilite.writer.handle import dictionary_columns


def test_few_distinct_values_are_dictionary_encoded_unique_ones_not():
    n = 40_000
    rng = np.random.default_rng(7)
    t = pa.table({
        "_hoodie_record_key": pa.array([str(i) for i in range(n)]),  # a meta column never
        "status": pa.array(rng.choice(["a", "b", "c"], n)),  # few values: the first look decides
        "name": pa.array([f"name{i}" for i in rng.integers(0, 3000, n)]),  # ~3000 of 16384 sampled: the sample
        "mid": pa.array(rng.integers(0, 6000, n)),  # ~4700 distinct in the sample, above a quarter of it
        "id": pa.array(np.arange(n)),  # unique: the first look rejects it
        "flag": pa.array(rng.integers(0, 2, n).astype(bool)),  # booleans never
    })
    assert dictionary_columns(t) == ["status", "name"]
    # small tables: the whole table is the sample
    assert dictionary_columns(t.slice(0, 100)) == ["status"]
    assert dictionary_columns(t.slice(0, 0)) == ["status", "name", "mid", "id"]
