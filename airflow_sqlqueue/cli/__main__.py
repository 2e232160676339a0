"""``python -m airflow_sqlqueue.cli``: the same as the ``sqlqueue`` console script."""

from airflow_sqlqueue.cli.main import main

raise SystemExit(main())
