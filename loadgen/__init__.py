"""loadgen — load testing and latency benchmarking for LLM inference servers."""

__version__ = "0.1.0"
__all__ = ["__version__"]
