"""`python -m worksnap` runs the command line."""

import sys

from worksnap.cli import main

sys.exit(main())
