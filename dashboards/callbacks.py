"""The pages' callbacks, registered on every app `create_app` builds. `dash.callback` hands the callbacks it
collected to the first app set up in the process and to no later one, and a process can build several
(the tests do): a second app would serve its pages with no callback behind them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash

_CALLBACKS: list[tuple[tuple[Any, ...], dict[str, Any], Callable[..., Any]]] = []


def page_callback(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`dash.callback`'s arguments; the function is registered on each app by `register_callbacks`."""

    def remember(function: Callable[..., Any]) -> Callable[..., Any]:
        _CALLBACKS.append((args, kwargs, function))
        return function

    return remember


def register_callbacks(app: dash.Dash) -> None:
    for args, kwargs, function in _CALLBACKS:
        app.callback(*args, **kwargs)(function)
