"""Routes that several methods serve."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def by_method(path: str, **handlers: Callable[[Request], Awaitable[Response]]) -> Route:
    """One route for a path that several methods serve, each by its own handler: two routes
    on one path would answer a third method's 405 with only the first one's ``Allow``."""

    async def endpoint(request: Request) -> Response:
        return await handlers["GET" if request.method == "HEAD" else request.method](request)

    return Route(path, endpoint, methods=list(handlers))
