"""What a running command needs besides the data: its lease on the output, live progress, a quick exit."""
