"""The live dashboard: a :class:`~loadgen.dashboard.feed.Feed` that turns a run's finished
records, level summaries and server samples into bounded time series and per-level points
(no I/O); a :class:`~loadgen.dashboard.tail.FolderTail` that feeds it from a run folder
being written; a small aiohttp server (:class:`~loadgen.dashboard.server.Dashboard`) that
pushes it to a page as Server-Sent Events; and the page, drawn with the report's figure
style. :mod:`loadgen.orchestrate.live_dashboard` wires them to a run and to ``loadgen watch``
(docs/dashboard.md)."""
