"""One module per `edge-sql` subcommand; each exposes a click command named `command`."""
