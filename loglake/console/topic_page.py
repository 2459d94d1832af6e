"""Placeholder (filled in next): the topic page pages."""

from __future__ import annotations

from starlette.routing import BaseRoute

ROUTES: list[BaseRoute] = []
