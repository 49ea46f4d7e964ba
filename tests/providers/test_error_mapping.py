"""Every error the SDKs raise for a call maps to one specific provider-failure type.

As httpx proves its mapping of httpcore's exceptions complete, this walks every
``APIStatusError`` subclass each SDK exports (Anthropic's has dozens) and the
connection, timeout and validation errors, and checks where each lands.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from beam_agents.errors import (
    ProviderCallError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from beam_agents.providers._common import map_sdk_error

SDKS = [pytest.importorskip(name) for name in ("openai", "anthropic")]


def _status_classes(sdk: types.ModuleType) -> list[type[Any]]:
    values = [getattr(sdk, name) for name in dir(sdk)]
    return [v for v in values if isinstance(v, type) and issubclass(v, sdk.APIStatusError)]


def _http(sdk: types.ModuleType) -> Any:
    """The HTTP library the SDK's errors carry requests and responses of (httpx or httpx2)."""
    import importlib

    name = sdk.APIStatusError.__init__.__annotations__["response"].split(".")[0]
    return importlib.import_module(name)


def _expected(status: int) -> type[ProviderCallError]:
    if status == 429:
        return ProviderRateLimitError
    if status == 408:
        return ProviderTimeoutError
    if status >= 500 or status == 409:
        return ProviderUnavailableError
    return ProviderRequestError


@pytest.mark.parametrize("sdk", SDKS, ids=lambda m: m.__name__)
def test_every_status_error_class_maps_by_its_status(sdk: types.ModuleType) -> None:
    http = _http(sdk)
    request = http.Request("POST", "http://127.0.0.1/v1/x")
    classes = _status_classes(sdk)
    assert len(classes) >= 9, classes  # the walk found the SDK's family
    for cls in classes:
        status = getattr(cls, "status_code", None) or 500
        # Built through the base initializer: a few subclasses (OAuthError) take other
        # arguments, but the SDK raises every one of them with a response of this status.
        exc = cls.__new__(cls)
        sdk.APIStatusError.__init__(
            exc,
            "no",
            response=http.Response(status, request=request, headers={"x-request-id": "r1"}),
            body={"error": {"type": "t", "message": "said no"}},
        )
        mapped = map_sdk_error(exc, sdk, "p")
        assert type(mapped) is _expected(status), (cls.__name__, status, mapped)
        assert (mapped.status, mapped.provider) == (status, "p")
        assert "t: said no" in str(mapped)


@pytest.mark.parametrize("sdk", SDKS, ids=lambda m: m.__name__)
def test_transport_and_validation_errors_map(sdk: types.ModuleType) -> None:
    http = _http(sdk)
    request = http.Request("POST", "http://127.0.0.1/v1/x")
    timeout = map_sdk_error(sdk.APITimeoutError(request=request), sdk, "p")
    assert type(timeout) is ProviderTimeoutError and timeout.transient
    refused = map_sdk_error(sdk.APIConnectionError(request=request), sdk, "p")
    assert type(refused) is ProviderUnavailableError and refused.transient
    invalid = sdk.APIResponseValidationError(http.Response(200, request=request), body={})
    assert type(map_sdk_error(invalid, sdk, "p")) is ProviderResponseError
