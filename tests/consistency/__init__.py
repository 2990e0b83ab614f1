"""One computation per statistic (issue 37): every number a surface prints is its summary's.

``parse`` reads printed numbers with their precision and splits off intervals; ``surfaces``
holds the maps of the level tables and level lines; ``console``, ``pages``, ``files`` and
``demo`` check the console text, the pages in Chromium, the machine-readable files and the
demo's own lines against the summary (``loadgen.api.read_summary``)."""
