"""The web dashboard: queues, jobs and operator actions in a browser (the `dashboard` extra).

`aiopgq dashboard` serves it; `create_app` makes the same ASGI app to mount in your own
Starlette or FastAPI service. It uses aiopgq only through the public Queue API.

>>> from aiopgq.dashboard import create_app
>>> app.mount("/queue", create_app(queue, token=os.environ["AIOPGQ_DASHBOARD_TOKEN"]))
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the aiopgq dashboard needs {exc.name}: pip install -e '.[dashboard]' in the aiopgq clone"
    ) from exc

from .app import TOKEN_ENV, create_app

__all__ = ["TOKEN_ENV", "create_app"]
