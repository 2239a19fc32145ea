"""`.hoodie/.aux` (hudilite.auxfiles): every kind has one path and a lifetime rollback, archival and clean follow."""

from __future__ import annotations

import os

import pytest

from hudilite import auxfiles, change_images
from hudilite.reader import overlay_cache
from hudilite.services import clean


def test_every_clean_kind_has_a_sweep():
    assert {k for k in auxfiles.KINDS if k.clean} == set(clean._SWEEPS)


def test_paths_are_built_from_the_declarations():
    base = os.path.join(os.sep, "t")
    assert change_images.instant_dir(base, "20240101000000000") == os.path.join(
        base, ".hoodie", ".aux", "hudilite_changes", "20240101000000000")
    assert overlay_cache.slice_dir(base, "p", "f", "1").startswith(auxfiles.path(base, auxfiles.OVERLAYS))
    assert len({k.name for k in auxfiles.KINDS}) == len(auxfiles.KINDS)


@pytest.mark.parametrize("reason", ["rollback", "archival"])
def test_remove_instant_removes_the_kinds_that_go_with_the_instant(tmp_path, reason):
    base = str(tmp_path)
    instant = "20240101000000000"
    for kind in auxfiles.KINDS:
        if kind.per_instant:
            d = auxfiles.path(base, kind, instant)
            os.makedirs(d)
            open(os.path.join(d, "x"), "wb").close()
    auxfiles.remove_instant(base, instant, reason)
    left = {k for k in auxfiles.KINDS if k.per_instant and os.path.exists(auxfiles.path(base, k, instant))}
    assert left == {k for k in auxfiles.KINDS if k.per_instant and not getattr(k, reason)}
    assert auxfiles.CHANGE_IMAGES not in left and auxfiles.SERVICE_CLAIMS in left


def test_remove_instant_refuses_an_unknown_reason(tmp_path):
    with pytest.raises(ValueError):
        auxfiles.remove_instant(str(tmp_path), "20240101000000000", "clean")
