"""Jinja2 templates the daemons render at run time; a package so that a wheel carries them and
``importlib.resources`` finds them wherever the project is installed."""
