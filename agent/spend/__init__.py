"""The daily spend cap and the model price table: policy kept in the database, used by
the model adapters and the runs."""
