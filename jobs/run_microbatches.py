"""spark-submit entrypoint: run a registered job's microbatches.

    spark-submit --jars <delta jars> jobs/run_microbatches.py --job clicks [--max-microbatches N]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project root: state_store and job modules

from state_store.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
