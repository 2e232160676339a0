"""The ``sqlqueue`` command line for operators, DBAs and scripts."""
