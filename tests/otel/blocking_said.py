"""What ``blocking_wf`` and ``blocking_at_import_wf`` say on stderr, for a test to count (a
module of its own: importing those sets the process's tracer provider)."""

from __future__ import annotations

EXPORTING = "wf-test: exporting "
"""What the exporter says as it begins an export: then the spans' names, as JSON."""
FLUSHING = "wf-test: force_flush"
"""What the provider says each time it is asked to export what it holds."""
