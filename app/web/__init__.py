"""Web layer: HTML pages, htmx fragments and the JSON API."""
