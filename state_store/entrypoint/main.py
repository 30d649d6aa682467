"""spark-submit entrypoint for every ``lakestate`` command, inside the installed package (the operators submit
this file, so an Airflow with the package installed needs no checkout of the repository):

    spark-submit --jars <delta jars> <site-packages>/state_store/entrypoint/main.py rescale <job> [options]

``python -c "import state_store.entrypoint.main as m; print(m.__file__)"`` prints the path.
"""
import sys

if __name__ == "__main__":
    from state_store.cli import main

    sys.exit(main(sys.argv[1:]))
