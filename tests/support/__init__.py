"""Shared test helpers: servers, stores, fixtures and scripted runs that several test folders use (``from support.X import ...``)."""
