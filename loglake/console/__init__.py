"""The loglake web console: ``loglake console --zookeeper ...`` (Starlette + Jinja2 + htmx).

Layout: ``app.py`` builds the Starlette application from the page modules (each lists its
``ROUTES``); ``context.py`` holds what every handler shares (the ZooKeeper catalog in tool
mode, the SDK clients, the security settings, the templates) and the response helpers;
``cli.py`` is the command. Pages render ``templates/*.html`` (all extend ``base.html``); their
live parts are htmx fragments polled every few seconds. ``static/vendor/`` holds htmx and
Chart.js exactly as their npm packages ship them, with their licence files.

Threads: handlers run on the event loop of the uvicorn server; every blocking call (SDK,
ZooKeeper) goes through :func:`loglake.console.context.blocking` (a worker thread).
Imports: ``client``, ``catalog``, ``config``, ``errors``, ``addresses``; from the broker only
its pure modules (``broker.codec``, ``broker.security.principal``/``acl_model``).
"""
