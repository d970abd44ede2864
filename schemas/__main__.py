"""python -m schemas: the schema registry's command line."""
import sys

from schemas.cli import main

sys.exit(main())
