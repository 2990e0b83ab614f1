"""The reference server: an OpenAI-compatible streaming API over a vLLM-style engine.

It never imports the client side. ``loadgen serve`` builds one :mod:`.config`
``ServeConfig`` and :mod:`.build` ``build_engine(config)``; :mod:`.api` serves it over
HTTP (:mod:`.protocol` parses requests, :mod:`.tokenizer` counts words, :mod:`.faults`
injects failures, :mod:`.prometheus` renders ``/metrics``) and :mod:`.app` runs it.
:mod:`.process` starts ``loadgen serve`` in a child process (the demo, tests).

- :mod:`.engine` — what both engines share: scheduler, KV cache, the step loop, models.
- :mod:`.sim` — the sim engine: GPU presets, the roofline, disaggregation.
- :mod:`.torch` — the torch engine: model, runner, CUDA graphs, memory, engine process.

Nothing is imported here, so that importing one part stays cheap.
"""
