"""Shared test setup."""

from __future__ import annotations


def pytest_configure(config):
    # strict mode: an exception inside the core (a ProxAI bug) raises instead of becoming a warning
    from proxai_core.strict import set_strict

    set_strict(True)
