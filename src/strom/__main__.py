"""``python -m strom`` runs the ``strom`` command."""

import sys

from strom.cli.main import main

sys.exit(main())
