"""spark-submit entrypoint: `lakestate rescale` (see `lakestate rescale --help`).

    spark-submit --jars <delta jars> jobs/rescale.py <job> [options]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project root: state_store and job modules

from state_store.cli import main

if __name__ == "__main__":
    sys.exit(main(["rescale", *sys.argv[1:]]))
