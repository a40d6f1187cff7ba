"""`python -m flows.cli ...` runs the `teamflow` command line."""

import sys

from flows.cli.app import main

sys.exit(main())
