"""The live dashboard: a feed of what the coordinator already knows (percentiles over a short
window, per-level summaries, server samples), a small aiohttp server that pushes it to a page
as Server-Sent Events, and the page that draws it with the report's figure style."""
