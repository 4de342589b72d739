"""`python -m edge_sql ...`: the `edge-sql` command, for environments where its script is not on PATH."""

from edge_sql.cli import main

main()
