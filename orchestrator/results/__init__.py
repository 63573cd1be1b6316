"""The Parquet schema, the result store and the dataset reader."""
