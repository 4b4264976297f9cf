"""The chat's routes and pages: the JSON API, the HTML pages, following an answer."""
