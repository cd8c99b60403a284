"""Tools that read a finished or running live run: its report and its merged logs."""
