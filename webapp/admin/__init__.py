"""The admin review of trimmed conversations: which sends left turns out, and which turns.

`queries` reads (aggregates in SQL, the review rebuilt with the chat's own rule),
`chart` draws the overview as plain SVG, `web` serves the pages, the JSON and the CSV.
"""
