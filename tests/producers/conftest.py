"""Every test of test_audited.py runs twice: with the native delivery counting and with the Python one."""

from __future__ import annotations

import pytest

from producers import audited


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.endswith("test_audited"):
        metafunc.fixturenames.append("delivery_counting")
        metafunc.parametrize("delivery_counting", ["native", "python"], indirect=True)


@pytest.fixture
def delivery_counting(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(audited, "native_module", None)
    elif audited.native_module is None:
        pytest.skip("the native delivery counting is not built here")
    return request.param
