"""The live dashboard: a :class:`~loadgen.dashboard.feed.Feed` that turns a run's finished
records, level summaries and server samples into bounded time series and per-level points
(no I/O), a :class:`~loadgen.dashboard.tail.FolderTail` that feeds it from a run folder
being written, and a local web page that shows them as the run goes."""
