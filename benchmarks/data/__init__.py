"""What reading data costs: spreadsheet and Parquet loading, the SQL worker's overhead."""
