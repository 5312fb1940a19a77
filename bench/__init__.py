"""wf's benchmarks (not part of the installed package). Run ``python -m bench``."""
