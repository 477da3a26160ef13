"""``python -m rlmd.cli``: the ``rlmd`` command."""

import sys

from rlmd.cli.main import main

sys.exit(main())
