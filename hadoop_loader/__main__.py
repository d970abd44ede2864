"""python -m hadoop_loader (or spark-submit hadoop_loader/__main__.py): one load."""
import sys

from hadoop_loader.cli import main

sys.exit(main())
