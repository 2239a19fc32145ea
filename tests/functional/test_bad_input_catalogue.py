"""The bad-input catalogue (tests/functional/bad_input_catalogue.py): every case fails with its error, message
fragments and the table's files unchanged; docs/bad-input.md is generated from the cases and must be current.
No Spark: about 5 s."""

from __future__ import annotations

import pytest

from tests.functional import bad_input_catalogue as catalogue

CATEGORIES = ["keys", "ordering values", "types", "schemas", "options", "paths", "damaged properties",
              "damaged timeline", "damaged base file", "concurrent misuse"]


@pytest.mark.parametrize("case", catalogue.CASES, ids=[c.name for c in catalogue.CASES])
def test_bad_input_case(case, tmp_path):
    catalogue.run_case(case, str(tmp_path))


def test_catalogue_covers_every_category():
    assert len(catalogue.CASES) >= 30
    assert sorted({c.category for c in catalogue.CASES}) == sorted(CATEGORIES)
    assert len({c.name for c in catalogue.CASES}) == len(catalogue.CASES)


def test_docs_bad_input_is_current():
    """Runs the cases the parametrized test has not run in this process (all, when selected alone)."""
    with open(catalogue.DOC, encoding="utf-8") as f:
        text = f.read()
    assert catalogue.generate() == text, \
        "docs/bad-input.md is stale: run `python -m tests.functional.bad_input_catalogue`"
