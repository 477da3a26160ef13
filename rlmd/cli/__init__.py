"""The command-line front door and everything that draws on a terminal.

``rlmd`` is :func:`rlmd.cli.main.main`. The subcommands' own modules: :mod:`.sandbox`
(``rlmd sandbox``), :mod:`.serve` (``rlmd serve / attach / doctor`` arguments), :mod:`.attach`
(the stdio bridge), :mod:`.doctor` (the report), :mod:`.progress` (live run progress) and
:mod:`.render` (runs and trajectories with rich). Only this package (and the ``rlmd_tui``
package) imports argparse, rich or textual.
"""

from rlmd.cli.main import main

__all__ = ["main"]
