"""``python -m rlmd``: the ``rlmd`` command."""

import sys

from rlmd.cli import main

sys.exit(main())
