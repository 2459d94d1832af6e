"""Jinja2 filters of the console's templates (pure functions, also used by handlers).

* ``size`` — bytes as ``1.5 MiB``; ``None`` as ``-``.
* ``when`` — epoch milliseconds as ``2024-05-01 12:00:00.123 UTC``; ``None``/negative as ``-``.
* ``age`` — seconds as ``3.2 s`` / ``4 min`` / ``2.1 h``.
"""

from __future__ import annotations

import datetime as dt

from starlette.templating import Jinja2Templates

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(value: int | float | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    for unit in _UNITS:
        if abs(amount) < 1024 or unit == _UNITS[-1]:
            return f"{int(amount)} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} {_UNITS[-1]}"  # pragma: no cover - loop always returns


def when(epoch_ms: int | float | None) -> str:
    if epoch_ms is None or epoch_ms < 0:
        return "-"
    try:
        moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def age(seconds: int | float | None) -> str:
    if seconds is None:
        return "-"
    value = float(seconds)
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value / 60:.1f} min"
    if value < 86400:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"


def install_filters(templates: Jinja2Templates) -> None:
    """Register the filters above on ``templates``' environment."""
    templates.env.filters.update(size=size, when=when, age=age)
