"""SQaLe's published episodes: their databases rebuilt (`replay`) and the page's results read (`page`)."""
