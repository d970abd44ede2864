"""python -m audit: the audit's processes."""
import sys

from audit.cli import main

sys.exit(main())
