"""``python -m tests.short_cancel_grace ARGS``: ``wf ARGS``, with its workers waiting 0.5 s,
not ``CANCEL_GRACE`` (5 s), for a drive that ignores its cancellation before they leave it
running.

For the tests of such a drive (a step that swallows its ``CancelledError``): what they check
(the process still stops, and says which run it left) does not depend on how long it waited.
"""

from wf.cli import main
from wf.engine import _worker

if __name__ == "__main__":
    _worker.CANCEL_GRACE = 0.5
    main()
