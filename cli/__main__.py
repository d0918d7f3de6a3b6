"""`python -m loopworks.cli`: the same as `loops`."""

import sys

from loopworks.cli import main

if __name__ == "__main__":
    sys.exit(main())
