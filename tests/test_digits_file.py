"""Digits read from scikit-learn's shipped CSV (no ``sklearn.datasets`` import) are exactly
``load_digits``'s."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from edgetrain.data.loaders import _digits
from edgetrain.data.split_cache import cached_split


def test_digits_from_the_csv_file_equal_load_digits() -> None:
    from sklearn.datasets import load_digits

    x, y = _digits()
    d = load_digits()
    assert x.shape == (1797, 8, 8) and x.dtype == d.images.dtype
    assert np.array_equal(x, d.images) and np.array_equal(y, d.target) and y.dtype == np.int64


def test_reading_digits_does_not_import_sklearn_datasets() -> None:
    import subprocess

    code = (
        "import sys; from edgetrain.data.loaders import _digits; _digits(); "
        "print('sklearn.datasets' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_cached_split_is_train_test_splits_and_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.model_selection import train_test_split

    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path))
    y = np.arange(100) % 10
    want = train_test_split(np.arange(100), test_size=20, random_state=7, stratify=y)
    a, b = cached_split(100, 80, 7, y)
    assert np.array_equal(a, np.sort(want[0])) and np.array_equal(b, np.sort(want[1]))
    files = list((tmp_path / "splits").glob("*.npz"))
    assert len(files) == 1
    # read back from the file (a corrupt file is passed over and written again)
    again = cached_split(100, 80, 7, y)
    assert all(np.array_equal(u, v) for u, v in zip(again, (a, b), strict=True))
    files[0].write_bytes(b"not an npz")
    healed = cached_split(100, 80, 7, y)
    assert np.array_equal(healed[0], a) and np.array_equal(healed[1], b)
    # indices that do not make a split of n are not used
    np.savez(files[0], first=np.zeros(80, dtype=np.int64), second=np.arange(20))
    assert np.array_equal(cached_split(100, 80, 7, y)[0], a)
    # another seed, labels or size is another entry
    cached_split(100, 80, 8, y)
    cached_split(100, 70, 7, y)
    assert len(list((tmp_path / "splits").glob("*.npz"))) == 3


def test_loading_digits_and_splitting_imports_no_sklearn_once_cached(tmp_path: Path) -> None:
    import os
    import subprocess

    code = (
        "import sys; from edgetrain.data.loaders import load_dataset; "
        "from edgetrain.recipe import DataSection; "
        "load_dataset(DataSection(dataset='digits'), 0); "
        "print(any(m.startswith('sklearn') for m in sys.modules))"
    )
    env = {**os.environ, "EDGETRAIN_CACHE_DIR": str(tmp_path)}
    outs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
        )
        for _ in range(2)
    ]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    assert [o.stdout.strip() for o in outs] == ["True", "False"]  # computed once, then read
