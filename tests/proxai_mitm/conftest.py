from __future__ import annotations

import pytest

from proxai_core.codecs import all_codecs
from tests.conftest import FIXTURES  # noqa: F401  (kept name for these tests)


def codecs_available() -> bool:
    """Every registered codec imports; an import failure raises (it must fail tests, never skip)."""
    all_codecs()
    return True


@pytest.fixture(scope="session")
def codecs_loaded() -> None:
    codecs_available()


#: (kept name) the codecs are required, never a reason to skip
needs_codecs = pytest.mark.usefixtures("codecs_loaded")
