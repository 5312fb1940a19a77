"""``python -m wf``: the same as the ``wf`` command."""

from wf.cli import main

if __name__ == "__main__":
    main()
